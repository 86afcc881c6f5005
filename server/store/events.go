package store

import (
	"context"
	"encoding/json"
	"time"
)

// MCP Events (db/code/events.sql, docs/events.md): the methods of events/* and of the outbound
// sender (server/events). Arguments travel as JSON; answers are the functions' jsonb.

// EventsTypes: switchboard.events_types — events/list's event types for the endpoint.
func (s *Store) EventsTypes(ctx context.Context, endpoint string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.events_types($1)`, endpoint)
}

// EventsPoll: switchboard.events_poll — one events/poll. Nil cursor: start from now.
func (s *Store) EventsPoll(ctx context.Context, endpoint, name string, args json.RawMessage, cursor *string, maxEvents *int, maxAgeMs *int64) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.events_poll($1, $2, $3::jsonb, $4, $5, $6)`,
		endpoint, name, string(args), cursor, maxEvents, maxAgeMs)
}

// EventsSubscribe: switchboard.events_subscribe — upsert a webhook subscription. ttlMs nil:
// the server's default; -1: the client asked for no expiry. Answers {verify: true, id} while
// the URL is unverified and verified is false. cred is the hash of the request's bearer
// credential: a subscription made with an OAuth access token ends when its grant is revoked.
func (s *Store) EventsSubscribe(ctx context.Context, endpoint, name string, args json.RawMessage, url, secret string,
	cursor *string, maxAgeMs, ttlMs *int64, verified bool, cred []byte) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.events_subscribe($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9, $10)`,
		endpoint, name, string(args), url, secret, cursor, maxAgeMs, ttlMs, verified, cred)
}

// EventsUnsubscribe: switchboard.events_unsubscribe.
func (s *Store) EventsUnsubscribe(ctx context.Context, endpoint, name string, args json.RawMessage, url string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.events_unsubscribe($1, $2, $3::jsonb, $4)`, endpoint, name, string(args), url)
}

// EventsRecord: switchboard.events_record — the recorder (todo.claimable). Its own
// transaction, before the fan-out: what it records is below the fan-out's bound.
func (s *Store) EventsRecord(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT switchboard.events_record()`).Scan(&n); err != nil {
		return 0, Classify(err)
	}
	return n, nil
}

// EventsFanout: switchboard.events_fanout — copies the new occurrences of up to hooks live
// subscriptions into the outbox, one transaction. Answers the subscriptions it moved (hooks
// of them: there may be more).
func (s *Store) EventsFanout(ctx context.Context, hooks int) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT switchboard.events_fanout($1)`, hooks).Scan(&n); err != nil {
		return 0, Classify(err)
	}
	return n, nil
}

// OutboxItem is one POST to make: the subscription, its URL, the secrets that sign it (two
// during a rotation's grace), the webhook-id and the body.
type OutboxItem struct {
	ID        int64
	HookID    string
	URL       string
	Secrets   []string
	MessageID string
	Body      []byte
	Attempts  int
}

// OutboxTake: switchboard.events_outbox_take — due rows up to limit POSTs (a group row is one
// POST per member, all in the same take), leased to this sender for lease (whole seconds, at
// least one).
func (s *Store) OutboxTake(ctx context.Context, limit int, lease time.Duration) ([]OutboxItem, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, hook_id, url, secrets, message_id, body::text, attempts
	                                  FROM switchboard.events_outbox_take($1, $2)`, limit, max(1, int(lease/time.Second)))
	if err != nil {
		return nil, Classify(err)
	}
	defer rows.Close()
	var out []OutboxItem
	for rows.Next() {
		var it OutboxItem
		var body string
		if err := rows.Scan(&it.ID, &it.HookID, &it.URL, &it.Secrets, &it.MessageID, &body, &it.Attempts); err != nil {
			return nil, Classify(err)
		}
		it.Body = []byte(body)
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, Classify(err)
	}
	return out, nil
}

// OutboxOutcome is the outcome of one POST: "ok", "gone" (410/413, not retried) or "retry"
// with its lastError category.
type OutboxOutcome struct {
	ID       int64
	HookID   string
	Outcome  string
	Category *string
}

// OutboxDone: switchboard.events_outbox_done_posts — the outcomes of a batch, one transaction
// (a group row's POSTs are told apart by their subscription).
func (s *Store) OutboxDone(ctx context.Context, outcomes []OutboxOutcome) error {
	ids := make([]int64, len(outcomes))
	hooks := make([]string, len(outcomes))
	out := make([]string, len(outcomes))
	cats := make([]*string, len(outcomes))
	for i, o := range outcomes {
		ids[i], hooks[i], out[i], cats[i] = o.ID, o.HookID, o.Outcome, o.Category
	}
	if _, err := s.pool.Exec(ctx, `SELECT switchboard.events_outbox_done_posts($1, $2, $3, $4)`, ids, hooks, out, cats); err != nil {
		return Classify(err)
	}
	return nil
}

// OutboxAge: switchboard.events_outbox_age — seconds since the oldest outbox row was written
// (0 when the outbox is empty).
func (s *Store) OutboxAge(ctx context.Context) (float64, error) {
	var age float64
	if err := s.pool.QueryRow(ctx, `SELECT switchboard.events_outbox_age()`).Scan(&age); err != nil {
		return 0, Classify(err)
	}
	return age, nil
}
