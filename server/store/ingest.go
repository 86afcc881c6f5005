package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The webhook receiver's calls (server/receiver): read a webhook by its ingest token, store a
// delivery, count refusals.

// IngestWebhook is a webhook as the receiver reads it (switchboard.webhook_for_ingest). The
// rule list stays raw JSON: the receiver compiles it once per saved version.
type IngestWebhook struct {
	ID, EndpointID, Source, TrustMode, TargetQueue string
	Secret                                         *string
	// Previous is the secret in force before a set-secret with --previous-ttl: it verifies until
	// PreviousUntil (checked against the receiver's clock, so a cached view ends on time too).
	Previous                     *string
	PreviousUntil                *time.Time
	Rules, DefaultAction, Params []byte
	RulesVersion                 int64
	MaxBody                      int64 // cap of the source type; 0: the provider default
}

// WebhookForIngest: switchboard.webhook_for_ingest — the webhook of an ingest token; found is
// false for an unknown token.
func (s *Store) WebhookForIngest(ctx context.Context, token string) (h IngestWebhook, found bool, err error) {
	err = s.pool.QueryRow(ctx,
		`SELECT webhook_id, endpoint_id, source_type, trust_mode, signing_secret, target_queue,
		        rules, default_action, rule_params, rules_version, coalesce(max_body, 0),
		        previous_secret, previous_secret_until
		   FROM switchboard.webhook_for_ingest($1)`, token).
		Scan(&h.ID, &h.EndpointID, &h.Source, &h.TrustMode, &h.Secret, &h.TargetQueue,
			&h.Rules, &h.DefaultAction, &h.Params, &h.RulesVersion, &h.MaxBody, &h.Previous, &h.PreviousUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return IngestWebhook{}, false, nil
	}
	if err != nil {
		return IngestWebhook{}, false, Classify(err)
	}
	return h, true, nil
}

// Delivery is one verified, routed delivery to store (the parameters of
// switchboard.ingest_if_current, in its order). Empty optional text is SQL NULL.
type Delivery struct {
	WebhookID    string
	DeliveryKey  string // the idempotency key
	EventType    string // optional
	Verified     bool
	VerifyDetail string
	ContentType  string // optional
	PayloadSize  int64
	Payload      []byte // jsonb text; nil: NULL (a binary body)
	Headers      []byte // jsonb text
	Title        string
	Disposition  string
	Routing      []byte   // jsonb text: the routing trace
	Queue        string   // optional: the queue the rules named
	Endpoints    []string // uuids; nil: NULL (the webhook's own targets)
	IngestToken  string   // the token the webhook was read by
	RulesVersion int64    // the rules version it was routed with
}

// ingestSQL stores one delivery; the casts name every parameter's type, since the parameters are
// sent as text.
const ingestSQL = `SELECT switchboard.ingest_if_current($1::uuid, $2::text, $3::text, $4::boolean, $5::text,
	$6::text, $7::int, $8::jsonb, $9::jsonb, $10::text, $11::text, $12::jsonb, $13::text, $14::uuid[], $15::text,
	$16::bigint)::text`

// params are the delivery's values in PostgreSQL's text format, in ingestSQL's order.
func (d *Delivery) params() [][]byte {
	return [][]byte{
		[]byte(d.WebhookID), []byte(d.DeliveryKey), nullableParam(d.EventType), boolParam(d.Verified),
		[]byte(d.VerifyDetail), nullableParam(d.ContentType), strconv.AppendInt(nil, d.PayloadSize, 10),
		d.Payload, d.Headers, []byte(d.Title), []byte(d.Disposition), d.Routing, nullableParam(d.Queue),
		uuidArrayParam(d.Endpoints), []byte(d.IngestToken), strconv.AppendInt(nil, d.RulesVersion, 10),
	}
}

// Ingest: switchboard.ingest_if_current — stores the event and one todo per target in one
// transaction, unless the token was rotated (not_found) or the rules saved (stale) since the
// webhook was read. The parameters go in PostgreSQL's text format, so the payload goes from the
// buffer it was read into straight into the connection's write buffer: one copy. pgx's Query
// would first encode it into a parameter buffer and copy it from there, one more full copy of
// every body (25 MiB for a large GitHub push). The statement is prepared once per connection,
// as Query would do.
func (s *Store) Ingest(ctx context.Context, d *Delivery) ([]byte, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, Classify(err)
	}
	defer conn.Release()
	sd, err := conn.Conn().Prepare(ctx, "switchboard_ingest", ingestSQL)
	if err != nil {
		return nil, Classify(err)
	}
	rr := conn.Conn().PgConn().ExecPrepared(ctx, sd.Name, d.params(), nil, nil)
	var out []byte
	for rr.NextRow() {
		out = append(out[:0], rr.Values()[0]...) // Values are only valid until the next row
	}
	if _, err := rr.Close(); err != nil {
		return nil, Classify(err)
	}
	return out, nil
}

// Text-format parameter values; nil is SQL NULL.

func nullableParam(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func boolParam(b bool) []byte {
	if b {
		return []byte("t")
	}
	return []byte("f")
}

// uuidArrayParam is a uuid[] literal; uuids need no quoting. nil stays NULL.
func uuidArrayParam(ids []string) []byte {
	if ids == nil {
		return nil
	}
	return []byte("{" + strings.Join(ids, ",") + "}")
}

// Refusals are a webhook's refused deliveries added up since the last write
// (switchboard.webhook_refused), by reason, and the newest one.
type Refusals struct {
	BadSignature, StaleTimestamp, TooLarge, Unparseable int64
	LastAt                                              time.Time
	LastReason                                          string
	LastDeliveryID                                      string // "": none named
}

// WebhookRefused adds refusal counts to a webhook.
func (s *Store) WebhookRefused(ctx context.Context, webhook string, r Refusals) error {
	var id *string
	if r.LastDeliveryID != "" {
		id = &r.LastDeliveryID
	}
	_, err := s.pool.Exec(ctx, `SELECT switchboard.webhook_refused($1, $2, $3, $4, $5, $6, $7, $8)`,
		webhook, r.BadSignature, r.StaleTimestamp, r.TooLarge, r.Unparseable, r.LastAt, r.LastReason, id)
	if err != nil {
		return Classify(err)
	}
	return nil
}
