package store

import (
	"context"
	"strconv"
)

// The agent's webhook tools (server/webhooktools). Each is one call of its switchboard function and
// answers the function's jsonb as it is.

// WebhookCreate: switchboard.webhook_create — a webhook with a fresh ingest token and signing
// secret (minted by the caller).
func (s *Store) WebhookCreate(ctx context.Context, endpoint, sourceType, targetQueue, ingestToken, secret string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.webhook_create($1, $2, $3, $4, $5)`,
		endpoint, sourceType, targetQueue, ingestToken, secret)
}

// WebhookRotate: switchboard.webhook_rotate — a new ingest token and signing secret.
func (s *Store) WebhookRotate(ctx context.Context, endpoint, webhook, ingestToken, secret string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.webhook_rotate($1, $2, $3, $4)`, endpoint, webhook, ingestToken, secret)
}

// WebhookDelete: switchboard.webhook_delete.
func (s *Store) WebhookDelete(ctx context.Context, endpoint, webhook string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.webhook_delete($1, $2)`, endpoint, webhook)
}

// WebhookList: switchboard.webhook_list — the caller's webhooks and its ceiling.
func (s *Store) WebhookList(ctx context.Context, endpoint string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.webhook_list($1)`, endpoint)
}

// OwnedWebhook: switchboard.owned_webhook as one JSON object (the row's columns).
func (s *Store) OwnedWebhook(ctx context.Context, endpoint, webhook string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT to_jsonb(w) FROM switchboard.owned_webhook($1, $2) w`, endpoint, webhook)
}

// EventsList: switchboard.events_list. Nil filters are absent.
func (s *Store) EventsList(ctx context.Context, endpoint string, webhook *string, limit *int, beforeID *int64) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.events_list($1, $2, $3, $4)`, endpoint, webhook, limit, beforeID)
}

// EventGet: switchboard.event_get — one event of the caller's webhooks; with webhook set, only
// an event of that webhook.
func (s *Store) EventGet(ctx context.Context, endpoint string, id int64, webhook *string) ([]byte, error) {
	if webhook == nil {
		return s.jsonCall(ctx, `SELECT switchboard.event_get($1, $2)`, endpoint, strconv.FormatInt(id, 10))
	}
	return s.jsonCall(ctx, `SELECT switchboard.event_get($1, $2, $3)`, endpoint, strconv.FormatInt(id, 10), *webhook)
}

// RouteAdd: switchboard.route_add.
func (s *Store) RouteAdd(ctx context.Context, endpoint, webhook, target string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.route_add($1, $2, $3)`, endpoint, webhook, target)
}

// RouteRemove: switchboard.route_remove.
func (s *Store) RouteRemove(ctx context.Context, endpoint, webhook, target string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.route_remove($1, $2, $3)`, endpoint, webhook, target)
}

// RouteList: switchboard.route_list.
func (s *Store) RouteList(ctx context.Context, endpoint, webhook string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.route_list($1, $2)`, endpoint, webhook)
}

// RulesGet: switchboard.rules_get.
func (s *Store) RulesGet(ctx context.Context, endpoint, webhook string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.rules_get($1, $2)`, endpoint, webhook)
}

// RuleSave is a rule list to store: JSON already validated by the caller (server/rules).
type RuleSave struct {
	Rules         []byte // a JSON array
	DefaultAction []byte // nil: none
	Params        []byte // nil: keep the saved ones
	// Expected makes the save a compare-and-swap against the version the edit was based on.
	Expected *int64
}

const rulesSaveSQL = `SELECT switchboard.rules_save($1, $2, $3, $4, $5, $6)`

func (r RuleSave) args(endpoint, webhook string) []any {
	return []any{endpoint, webhook, r.Rules, r.DefaultAction, r.Params, r.Expected}
}

// RulesSave: switchboard.rules_save — checks the grant under a row lock and stores the list.
func (s *Store) RulesSave(ctx context.Context, endpoint, webhook string, r RuleSave) ([]byte, error) {
	return s.jsonCall(ctx, rulesSaveSQL, r.args(endpoint, webhook)...)
}

// RulesTry is RulesSave in a transaction that is rolled back: the rule set as it would be saved
// (checked against the grant), with nothing persisted.
func (s *Store) RulesTry(ctx context.Context, endpoint, webhook string, r RuleSave) ([]byte, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, Classify(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var out []byte
	if err := tx.QueryRow(ctx, rulesSaveSQL, r.args(endpoint, webhook)...).Scan(&out); err != nil {
		return nil, Classify(err)
	}
	return out, nil
}
