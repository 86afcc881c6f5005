package receiver

import (
	"context"
	"net/http"

	"switchboard/server/receiver/provider"
	"switchboard/server/rules"
)

// DispositionHandshake marks an event that was a sender checking the URL (Slack's
// url_verification, a GitHub or gitea ping): stored for the record, never routed, no todo.
const DispositionHandshake = "handshake"

// decide routes a verified delivery and names its disposition. A handshake skips the rules: it
// is nothing an agent should see, whatever a rule would have done with it.
func (rc *Receiver) decide(ctx context.Context, hook *webhook, v provider.Verdict, d *delivery) (rules.Decision, string) {
	if v.Handshake {
		return rules.Decision{Disposition: DispositionHandshake, Trace: rules.Trace{Stage: DispositionHandshake}},
			DispositionHandshake
	}
	decision := rc.route(ctx, hook, v, d.headers, d.contentType, d.body)
	switch {
	case decision.Faulted:
		return decision, "faulted"
	case decision.Drop:
		return decision, "dropped"
	}
	return decision, "delivered"
}

// answerChallenge writes Slack's expected answer to a url_verification: 200 with the challenge
// as plain text, the only reply Slack accepts. It reports whether it answered; a forge ping gets
// the ordinary 202 JSON instead.
func answerChallenge(w http.ResponseWriter, source string, res *ingestResult, v provider.Verdict) bool {
	if res.Disposition != DispositionHandshake || source != "slack" || !v.Handshake {
		return false
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(v.Challenge))
	return true
}
