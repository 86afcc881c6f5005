// Package ingest is the webhook receiver: POST /webhooks/w/{ingest_token}. It bounds the body,
// finds the webhook, verifies the provider signature over the raw bytes, evaluates the routing
// rules, and hands everything to one SQL call (switchboard.ingest_if_current, then ingest) that
// stores the event and one todo per target in a single transaction. The doorbell rings from
// inside that transaction.
package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"switchboard/server/ingest/provider"
	"switchboard/server/rules"
	"switchboard/server/store"
)

// MaxBody is the largest delivery accepted; larger ones get 413 and nothing is stored.
const MaxBody = 5 << 20

// Receiver serves the ingest URL. Mount it at "POST /webhooks/w/{token}".
type Receiver struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	rules   *rules.Cache
	hooks   hookCache
	now     func() time.Time
	counter *prometheus.CounterVec
}

// New builds a receiver. counter (labels source, status) may be nil.
func New(pool *pgxpool.Pool, log *slog.Logger, cache *rules.Cache, counter *prometheus.CounterVec) *Receiver {
	return &Receiver{pool: pool, log: log, rules: cache, now: time.Now, counter: counter}
}

// webhook is the receiver's view of switchboard.webhook_by_token. The rule list stays raw JSON:
// it is decoded only to compile it, once per saved version (see route).
type webhook struct {
	ID, EndpointID, Source, TrustMode, TargetQueue string
	Secret                                         *string
	Rules, DefaultAction, Params                   []byte
	RulesVersion                                   int64
}

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

	if r.ContentLength > MaxBody {
		fail(http.StatusRequestEntityTooLarge, "payload_too_large", "body exceeds 5 MiB")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(http.StatusRequestEntityTooLarge, "payload_too_large", "body exceeds 5 MiB")
			return
		}
		fail(http.StatusBadRequest, "invalid_argument", "could not read body")
		return
	}

	ctx := r.Context()
	d := &delivery{token: r.PathValue("token"), header: r.Header, headers: provider.SanitizeHeaders(r.Header),
		contentType: r.Header.Get("Content-Type"), body: body}
	// A view of the webhook from the cache is checked by ingest_if_current; when it is out of
	// date (or a signature fails against it) the webhook is read again once, so every answer is
	// the one a fresh read gives.
	a := rc.attempt(ctx, d, true)
	if a.stale {
		rc.hooks.forget(d.token)
		a = rc.attempt(ctx, d, false)
	}
	log := rc.log
	if a.hook != nil {
		source = a.hook.Source
		log = rc.log.With("webhook_id", a.hook.ID, "source", a.hook.Source)
	}
	if f := a.refused; f != nil {
		fail(f.status, f.code, f.message)
		switch {
		case f.err != nil:
			log.ErrorContext(ctx, f.reason, "err", f.err)
		case f.reason != "":
			log.Log(ctx, f.level, "ingest refused", "status", status, "reason", f.reason)
		}
		return
	}
	res, verdict := a.res, a.verdict

	out := map[string]any{
		"todos": res.Todos, "created": res.Created, "verified": verdict.Verified, "trust_mode": res.TrustMode,
	}
	switch res.Disposition {
	case "dropped":
		out["dropped"] = true
	case "faulted":
		out["faulted"] = true
	}
	if len(res.Todos) > 0 {
		out["id"], out["queue"] = res.Todos[0].ID, res.Todos[0].Queue
	}
	reply(http.StatusAccepted, out)
	log.InfoContext(ctx, "ingest", "status", status, "event_id", res.EventID, "created", res.Created,
		"duplicate", res.Duplicate, "disposition", res.Disposition, "duration_ms", time.Since(start).Milliseconds())
}

// delivery is one request as the receiver read it.
type delivery struct {
	token, contentType string
	header             http.Header
	headers            map[string]string // sanitized, as stored
	body               []byte
}

// refusal is an answer other than 202: status, error code and message for the sender, and what
// to log (err: an internal failure logged under reason; else reason at level, when set).
type refusal struct {
	status        int
	code, message string
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

// attempt verifies, routes and stores a delivery against one view of its webhook: the cached
// one when cached is set and there is one, else a fresh read. Only a cached view can be stale.
func (rc *Receiver) attempt(ctx context.Context, d *delivery, cached bool) outcome {
	var hook *webhook
	if cached {
		hook = rc.hooks.get(d.token, rc.now())
	}
	fresh := hook == nil
	if fresh {
		h, err := rc.lookup(ctx, d.token)
		if errors.Is(err, pgx.ErrNoRows) {
			return outcome{refused: &refusal{status: http.StatusNotFound, code: "not_found", message: "unknown webhook"}}
		}
		if err != nil {
			return outcome{refused: &refusal{status: http.StatusInternalServerError, code: "internal",
				message: "internal error", reason: "ingest lookup", err: err}}
		}
		hook = h
		rc.hooks.put(d.token, hook, rc.now())
	}
	o := outcome{hook: hook}

	var secret []byte
	if hook.Secret != nil {
		secret = []byte(*hook.Secret)
	}
	var err error
	o.verdict, err = provider.Verify(hook.Source, secret, provider.Request{Header: d.header, Body: d.body, Now: rc.now()})
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
			message: "signature verification failed", reason: "signature", level: slog.LevelInfo}
		return o
	}

	decision := rc.route(ctx, hook, o.verdict, d.headers, d.contentType, d.body)
	disposition := "delivered"
	switch {
	case decision.Faulted:
		disposition = "faulted"
	case decision.Drop:
		disposition = "dropped"
	}
	o.res, err = rc.store(ctx, d.token, hook, o.verdict, d.headers, d.contentType, d.body, disposition, decision)
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
	case err != nil:
		o.refused = &refusal{status: http.StatusInternalServerError, code: "internal",
			message: "internal error", reason: "ingest store", err: err}
	}
	return o
}

func (rc *Receiver) lookup(ctx context.Context, token string) (*webhook, error) {
	var h webhook
	err := rc.pool.QueryRow(ctx,
		`SELECT webhook_id, endpoint_id, source_type, trust_mode, signing_secret, target_queue,
		        rules, default_action, rule_params, rules_version
		   FROM switchboard.webhook_by_token($1)`, token).
		Scan(&h.ID, &h.EndpointID, &h.Source, &h.TrustMode, &h.Secret, &h.TargetQueue,
			&h.Rules, &h.DefaultAction, &h.Params, &h.RulesVersion)
	if err != nil {
		return nil, err
	}
	return &h, nil
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

func (rc *Receiver) store(ctx context.Context, token string, hook *webhook, v provider.Verdict, headers map[string]string,
	contentType string, body []byte, disposition string, d rules.Decision) (*ingestResult, error) {
	headersJSON, err := json.Marshal(headers)
	if err != nil {
		return nil, err
	}
	traceJSON, err := json.Marshal(d.Trace)
	if err != nil {
		return nil, err
	}
	var queue *string
	if d.Queue != "" {
		queue = &d.Queue
	}
	var raw []byte
	err = rc.pool.QueryRow(ctx,
		`SELECT switchboard.ingest_if_current($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		hook.ID, provider.IdempotencyKey(hook.ID, v, body), nullable(v.EventType), v.Verified, v.VerifyDetail,
		nullable(contentType), len(body), storedPayload(body), headersJSON, v.Title, disposition, traceJSON,
		queue, d.Endpoints, token, hook.RulesVersion).Scan(&raw)
	if err != nil {
		return nil, err
	}
	var res ingestResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// storedPayload keeps the body as JSON: parsed when it is JSON, else as a JSON string of its text
// (form-encoded Slack commands, plain text), so nothing a producer sent is lost. Binary bodies
// that are not UTF-8 are stored as null; their size and hash (the delivery key) remain.
func storedPayload(body []byte) []byte {
	if json.Valid(body) {
		return body
	}
	if utf8.Valid(body) {
		b, _ := json.Marshal(string(body))
		return b
	}
	return nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
