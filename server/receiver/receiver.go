// Package receiver is the HTTP receiver of provider deliveries: POST /webhooks/w/{ingest_token}.
// It bounds the body, finds the webhook, verifies the provider signature over the raw bytes
// (provider/), evaluates the routing rules, and hands everything to one store call
// (switchboard.ingest_if_current, then ingest) that stores the event and one todo per target in
// a single transaction. The doorbell rings from inside that transaction. The agent's tools that
// manage webhooks are another package, server/webhooktools.
package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"switchboard/server/bodybudget"
	"switchboard/server/receiver/provider"
	"switchboard/server/rules"
	"switchboard/server/safejson"
	"switchboard/server/store"
)

// MaxBody is the body cap of most source types; larger deliveries get 413 and nothing is stored.
const MaxBody = provider.DefaultMaxBody

// BodyLimit is the default body cap of a source type (github 25 MiB, the others MaxBody). The
// settings ingest_max_body_<source> change it; the receiver reads them with the webhook
// (bodyLimit), before a byte of the body is read.
func BodyLimit(source string) int64 { return provider.MaxBody(source) }

// MaxDeliveryID is the longest delivery id accepted (longer ones are refused with 422).
const MaxDeliveryID = 256

// Receiver serves the ingest URL. Mount it at "POST /webhooks/w/{token}".
type Receiver struct {
	st      *store.Store
	log     *slog.Logger
	rules   *rules.Cache
	hooks   hookCache
	budget  *bodybudget.Budget
	now     func() time.Time
	counter *prometheus.CounterVec
	refused refusalLog
}

// New builds a receiver with the default body budget (bodybudget.Default). counter (labels
// source, status) may be nil.
func New(st *store.Store, log *slog.Logger, cache *rules.Cache, counter *prometheus.CounterVec) *Receiver {
	return &Receiver{st: st, log: log, rules: cache, now: time.Now, counter: counter,
		budget: bodybudget.New(0), refused: refusalLog{st: st, log: log}}
}

// WithRefusalMetrics counts refused deliveries into counter (labels source, reason) as well as
// per webhook in the database, and the writes of those counts into writes.
func (rc *Receiver) WithRefusalMetrics(counter *prometheus.CounterVec, writes prometheus.Counter) *Receiver {
	rc.refused.counter, rc.refused.writes = counter, writes
	return rc
}

// WithBudget makes the receiver share a body budget (bytes in flight across deliveries).
func (rc *Receiver) WithBudget(b *bodybudget.Budget) *Receiver {
	rc.budget = b
	return rc
}

// webhook is the receiver's view of switchboard.webhook_for_ingest. The rule list stays raw JSON:
// it is decoded only to compile it, once per saved version (see route).
type webhook store.IngestWebhook

// ServeHTTP decides before it reads: the token is resolved (from the remembered webhooks or
// with one SQL call) and the body's size checked against the webhook's cap and the server's
// budget before a byte of the body is read. Then it verifies, checks, routes and stores.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	source, status := "unknown", http.StatusInternalServerError
	defer func() {
		if rc.counter != nil {
			rc.counter.WithLabelValues(source, http.StatusText(status)).Inc()
		}
	}()
	reply := func(code int, body any) {
		status = code
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	}
	fail := func(code int, kind, message string) {
		reply(code, map[string]any{"error": map[string]string{"code": kind, "message": message}})
	}
	// refuse answers without reading the body, then lets the sender finish writing it.
	refuse := func(f *refusal) {
		if f.retry {
			bodybudget.RetryAfter(w, time.Second)
		}
		bodybudget.Refuse(w, r.Body, func() { fail(f.status, f.code, f.message) })
	}
	logRefusal := func(log *slog.Logger, f *refusal) {
		switch {
		case f.err != nil:
			log.ErrorContext(r.Context(), f.reason, "err", store.Classify(f.err).Unwrap()) // the cause a store error keeps
		case f.reason != "":
			log.Log(r.Context(), f.level, "ingest refused", "status", status, "reason", f.reason)
		}
	}

	ctx := r.Context()
	token := r.PathValue("token")
	var hook *webhook
	fresh, f := false, (*refusal)(nil)
	if plausibleToken(token) {
		hook, fresh, f = rc.resolve(ctx, token, true)
	} else {
		f = &refusal{status: http.StatusNotFound, code: "not_found", message: "unknown webhook"}
	}
	if f != nil {
		if f.status == http.StatusNotFound {
			// Unknown: answer and close, reading nothing (a stranger's body is not worth a byte).
			w.Header().Set("Connection", "close")
			fail(f.status, f.code, f.message)
		} else {
			refuse(f)
		}
		logRefusal(rc.log, f)
		return
	}
	source = hook.Source
	log := rc.log.With("webhook_id", hook.ID, "source", hook.Source)

	// Refusals a sender can be told about (the webhook "gets nothing") are counted per webhook.
	count := func(reason string) {
		rc.refused.add(hook.ID, hook.Source, reason, provider.HeaderDeliveryID(hook.Source, r.Header))
	}
	limit := bodyLimit(hook)
	if r.ContentLength > limit {
		refuse(tooLarge(limit, hook.Source))
		count(provider.ReasonTooLarge)
		return
	}
	reserve := r.ContentLength
	if reserve < 0 { // chunked: the cap is the most it can hold
		reserve = limit
	}
	if !rc.budget.Acquire(reserve) {
		f := &refusal{status: http.StatusServiceUnavailable, code: "unavailable", retry: true,
			message: "too many deliveries in flight; retry", reason: "body budget full", level: slog.LevelWarn}
		refuse(f)
		logRefusal(log, f)
		return
	}
	defer rc.budget.Release(reserve)
	body, err := readBody(r.Body, r.ContentLength, limit)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			refuse(tooLarge(limit, hook.Source))
			count(provider.ReasonTooLarge)
			return
		}
		fail(http.StatusBadRequest, "invalid_argument", "could not read body")
		return
	}

	d := &delivery{token: token, header: r.Header, headers: provider.SanitizeHeaders(r.Header),
		contentType: r.Header.Get("Content-Type"), body: body}
	// A view of the webhook from the cache is checked by ingest_if_current; when it is out of
	// date (or a signature fails against it) the webhook is read again once, so every answer is
	// the one a fresh read gives.
	a := rc.attempt(ctx, d, hook, fresh)
	if a.stale {
		rc.hooks.forget(token)
		hook, _, f = rc.resolve(ctx, token, false)
		if f != nil {
			a = outcome{refused: f}
		} else {
			a = rc.attempt(ctx, d, hook, true)
		}
	}
	if f := a.refused; f != nil {
		if f.retry {
			bodybudget.RetryAfter(w, time.Second)
		}
		fail(f.status, f.code, f.message)
		logRefusal(log, f)
		if f.counted != "" {
			count(f.counted)
		}
		return
	}
	res, verdict := a.res, a.verdict
	if answerChallenge(w, source, res, verdict) {
		status = http.StatusOK
		log.InfoContext(ctx, "ingest handshake", "status", status, "event_id", res.EventID, "duplicate", res.Duplicate)
		return
	}

	out := map[string]any{
		"todos": res.Todos, "created": res.Created, "verified": verdict.Verified, "trust_mode": res.TrustMode,
	}
	switch res.Disposition {
	case "dropped":
		out["dropped"] = true
	case "faulted":
		out["faulted"] = true
	case DispositionHandshake:
		out["handshake"] = true
	}
	if d.sanitized {
		out["sanitized"] = true
	}
	if len(res.Todos) > 0 {
		out["id"], out["queue"] = res.Todos[0].ID, res.Todos[0].Queue
	}
	reply(http.StatusAccepted, out)
	log.InfoContext(ctx, "ingest", "status", status, "event_id", res.EventID, "created", res.Created,
		"duplicate", res.Duplicate, "disposition", res.Disposition, "sanitized", d.sanitized,
		"duration_ms", time.Since(start).Milliseconds())
}

// plausibleToken: a token that could name a webhook; others (too long, not UTF-8, with a NUL
// or control characters) are unknown without asking the database, which could not even hold
// them as text.
func plausibleToken(s string) bool {
	if s == "" || len(s) > 256 || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

var errTooLarge = errors.New("body too large")

// readBody reads a body of a known length into one buffer of exactly that size (no doubling
// as io.ReadAll does), or a chunked one up to limit.
func readBody(body io.Reader, length, limit int64) ([]byte, error) {
	if length == 0 || body == nil || body == http.NoBody {
		return nil, nil
	}
	if length > 0 {
		buf := make([]byte, length)
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(body, limit+1)); err != nil {
		return nil, err
	}
	if int64(b.Len()) > limit {
		return nil, errTooLarge
	}
	return b.Bytes(), nil
}

// delivery is one request as the receiver read it.
type delivery struct {
	token, contentType string
	header             http.Header
	headers            map[string]string // sanitized, as stored
	body               []byte

	// Set by check, once: the payload as stored and whether text was replaced in it.
	checked   bool
	checkErr  error
	payload   []byte
	sanitized bool
}

// check decides whether an authentic body may be stored, and how (see storedPayload): JSON
// nested beyond 64 levels or holding a number a binary64 cannot is refused, since a strict
// client could never decode the todo; text jsonb cannot hold is replaced by U+FFFD.
func (d *delivery) check() error {
	if d.checked {
		return d.checkErr
	}
	d.checked = true
	rep, err := safejson.Scan(d.body)
	if err != nil {
		d.checkErr = err
		return err
	}
	d.payload, d.sanitized = storedPayload(d.body, rep)
	return nil
}

// refusal is an answer other than 202: status, error code and message for the sender, and what
// to log (err: an internal failure logged under reason; else reason at level, when set).
type refusal struct {
	status        int
	code, message string
	retry         bool   // a 503 worth retrying soon: send Retry-After
	counted       string // the reason it counts under for its webhook (provider.Reasons), if any
	reason        string
	level         slog.Level
	err           error
}

// outcome is the result of one attempt: stored (res), refused, or stale (the cached view of the
// webhook turned out to be out of date: read it again and retry).
type outcome struct {
	hook    *webhook
	verdict provider.Verdict
	res     *ingestResult
	refused *refusal
	stale   bool
}

// resolve finds the webhook of a token: the remembered view when cached is set and there is
// one (fresh false), else one SQL call (fresh true).
func (rc *Receiver) resolve(ctx context.Context, token string, cached bool) (*webhook, bool, *refusal) {
	if cached {
		if hook := rc.hooks.get(token, rc.now()); hook != nil {
			return hook, false, nil
		}
	}
	w, ok, err := rc.st.WebhookForIngest(ctx, token)
	switch {
	case err == nil && !ok:
		return nil, true, &refusal{status: http.StatusNotFound, code: "not_found", message: "unknown webhook"}
	case err != nil && store.Unavailable(err):
		return nil, true, &refusal{status: http.StatusServiceUnavailable, code: "unavailable", retry: true,
			message: "database unavailable; retry", reason: "ingest lookup: database unavailable", level: slog.LevelWarn}
	case err != nil:
		return nil, true, &refusal{status: http.StatusInternalServerError, code: "internal",
			message: "internal error", reason: "ingest lookup", err: err}
	}
	h := webhook(w)
	rc.hooks.put(token, &h, rc.now())
	return &h, true, nil
}

// attempt verifies, checks, routes and stores a delivery against one view of its webhook
// (fresh: just read from the database). Only a cached view can be stale.
func (rc *Receiver) attempt(ctx context.Context, d *delivery, hook *webhook, fresh bool) outcome {
	o := outcome{hook: hook}

	var secret []byte
	if hook.Secret != nil {
		secret = []byte(*hook.Secret)
	}
	req := provider.Request{Header: d.header, Body: d.body, Now: rc.now()}
	var err error
	o.verdict, err = provider.Verify(hook.Source, secret, req)
	if errors.Is(err, provider.ErrUnauthorized) && hook.Previous != nil && hook.PreviousUntil != nil &&
		req.Now.Before(*hook.PreviousUntil) {
		// A provider's rotation: the secret in force before still verifies for its TTL. When
		// both fail, the more telling failure is kept (a stale timestamp over a mismatch).
		v, perr := provider.Verify(hook.Source, []byte(*hook.Previous), req)
		if perr == nil || provider.RefusalReason(o.verdict) == provider.ReasonBadSignature {
			o.verdict, err = v, perr
		}
		if perr == nil {
			o.verdict.VerifyDetail += " (previous secret)"
		}
	}
	switch {
	case err != nil && !fresh:
		o.stale = true
		return o
	case errors.Is(err, provider.ErrNoSecret):
		o.refused = &refusal{status: http.StatusServiceUnavailable, code: "unavailable",
			message: "webhook has no signing secret", reason: "no secret", level: slog.LevelWarn}
		return o
	case err != nil:
		o.refused = &refusal{status: http.StatusUnauthorized, code: "unauthenticated",
			message: "signature verification failed", reason: "signature", level: slog.LevelInfo,
			counted: provider.RefusalReason(o.verdict)}
		return o
	}

	if o.verdict.BadDeliveryID {
		o.refused = &refusal{status: http.StatusUnprocessableEntity, code: "invalid_delivery_id",
			message: fmt.Sprintf("delivery id is over %d bytes, not UTF-8, or holds control characters", MaxDeliveryID),
			reason:  "delivery id", level: slog.LevelInfo, counted: provider.ReasonUnparseable}
		return o
	}
	if err := d.check(); err != nil {
		o.refused = &refusal{status: http.StatusUnprocessableEntity, code: "invalid_payload", message: err.Error(),
			reason: "payload: " + err.Error(), level: slog.LevelInfo, counted: provider.ReasonUnparseable}
		return o
	}

	decision, disposition := rc.decide(ctx, hook, o.verdict, d)
	o.res, err = rc.store(ctx, d, hook, o.verdict, disposition, decision)
	code := ""
	if err != nil {
		code = store.Classify(err).Code // the one SQLSTATE -> code map
	}
	switch {
	case (code == store.CodeNotFound || code == store.CodeStale) && !fresh:
		o.stale = true // rotated, deleted, or rules saved since it was cached
	case code == store.CodeNotFound:
		rc.hooks.forget(d.token)
		o.refused = &refusal{status: http.StatusNotFound, code: "not_found", message: "unknown webhook"}
	case code == store.CodeStale:
		rc.hooks.forget(d.token)
		o.refused = &refusal{status: http.StatusServiceUnavailable, code: "unavailable",
			message: "webhook rules changed while routing; retry", reason: "rules changed", level: slog.LevelWarn}
	case code == store.CodeNoTargets:
		o.refused = &refusal{status: http.StatusServiceUnavailable, code: "unavailable",
			message: "webhook has no live delivery target", reason: "no targets", level: slog.LevelWarn}
	case err != nil && store.Unavailable(err):
		o.refused = &refusal{status: http.StatusServiceUnavailable, code: "unavailable", retry: true,
			message: "database unavailable; retry", reason: "ingest store: database unavailable", level: slog.LevelWarn}
	case err != nil:
		o.refused = &refusal{status: http.StatusInternalServerError, code: "internal",
			message: "internal error", reason: "ingest store", err: err}
	}
	return o
}

// compile decodes a stored rule list and compiles it (the rules cache calls it once per version).
func (h *webhook) compile() (*rules.Program, error) {
	var (
		list   []rules.Rule
		def    *rules.Action
		params map[string]any
	)
	if err := json.Unmarshal(h.Rules, &list); err != nil {
		return nil, err
	}
	if len(h.DefaultAction) > 0 {
		if err := json.Unmarshal(h.DefaultAction, &def); err != nil {
			return nil, err
		}
	}
	if err := json.Unmarshal(h.Params, &params); err != nil {
		return nil, err
	}
	return rules.Compile(list, def, params)
}

// route evaluates the webhook's rules (compiled once per saved version) and returns the decision
// with its trace. Without rules every target gets the webhook's own queue.
func (rc *Receiver) route(ctx context.Context, hook *webhook, v provider.Verdict, headers map[string]string,
	contentType string, body []byte) rules.Decision {
	d := rules.Decision{Disposition: rules.DispositionDefault, Trace: rules.Trace{Stage: rules.StageDefault}}
	if string(hook.Rules) != "[]" || len(hook.DefaultAction) > 0 {
		prog, err := rc.rules.Get(hook.ID, hook.RulesVersion, hook.compile)
		if err != nil {
			// A stored list that no longer compiles fails closed, like a rule error.
			return rules.Decision{Faulted: true, Disposition: rules.DispositionFaulted,
				Trace: rules.Trace{Stage: rules.StageFault, Cause: "compile"}}
		}
		env := rules.Envelope(hook.Source, v.EventType, hook.ID, hook.TrustMode, v.Verified, contentType,
			len(body), headers, body)
		d = prog.Evaluate(ctx, env)
	}
	d.NameQueue(hook.TargetQueue)
	return d
}

type ingestResult struct {
	EventID     int64  `json:"event_id"`
	Duplicate   bool   `json:"duplicate"`
	Disposition string `json:"disposition"`
	TrustMode   string `json:"trust_mode"`
	Created     int    `json:"created"`
	Todos       []struct {
		ID         string `json:"id"`
		EndpointID string `json:"endpoint_id"`
		Queue      string `json:"queue"`
		Created    bool   `json:"created"`
	} `json:"todos"`
}

func (rc *Receiver) store(ctx context.Context, d *delivery, hook *webhook, v provider.Verdict,
	disposition string, dec rules.Decision) (*ingestResult, error) {
	headersJSON, err := json.Marshal(d.headers)
	if err != nil {
		return nil, err
	}
	// The routing trace, stored with the event and its todos, also says when text was replaced.
	traceJSON, err := json.Marshal(struct {
		rules.Trace
		Sanitized bool `json:"sanitized,omitempty"`
	}{dec.Trace, d.sanitized})
	if err != nil {
		return nil, err
	}
	raw, err := rc.st.Ingest(ctx, &store.Delivery{
		WebhookID: hook.ID, DeliveryKey: provider.IdempotencyKey(hook.ID, v, d.body), EventType: v.EventType,
		Verified: v.Verified, VerifyDetail: v.VerifyDetail, ContentType: d.contentType, PayloadSize: int64(len(d.body)),
		Payload: d.payload, Headers: headersJSON, Title: v.Title, Disposition: disposition, Routing: traceJSON,
		Queue: dec.Queue, Endpoints: dec.Endpoints, IngestToken: d.token, RulesVersion: hook.RulesVersion})
	if err != nil {
		return nil, err
	}
	var res ingestResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// storedPayload is the body as stored: the JSON itself; else a JSON string of its text
// (form-encoded Slack commands, plain text), so nothing a producer sent is lost; binary bodies
// that are not UTF-8 are stored as null (their size and hash, the delivery key, remain). Text
// jsonb cannot hold (NUL, unpaired surrogates, bytes that are not UTF-8 inside JSON strings) is
// replaced by U+FFFD, and sanitized says so. The signature was verified over the raw bytes.
func storedPayload(body []byte, rep safejson.Report) (payload []byte, sanitized bool) {
	switch {
	case rep.JSON && rep.Unstorable:
		return safejson.Sanitize(body), true
	case rep.JSON:
		return body, false
	case utf8.Valid(body):
		text, changed := safejson.SanitizeText(string(body))
		b, _ := json.Marshal(text)
		return b, changed
	}
	return nil, false
}
