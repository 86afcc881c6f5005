package store

import (
	"context"
	"encoding/json"
	"time"
)

// The console's queues, todos, webhooks and chart (server/console): one call of a
// switchboard.console_* function each (db/code/console_queues.sql, console_webhooks.sql), always
// with the signed-in human (ConsoleHuman, console.go) and whether they are an operator; a human
// reaches only their own rows (an operator: everyone's).

// by is the actor recorded on a redrive or cancel.
func by(h ConsoleHuman) string { return "human:" + h.Name }

// orNull is nil for "" (a filter left empty), else the string.
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// QueueRow is one queue of one endpoint on the home and queues screens.
type QueueRow struct {
	EndpointID    string `json:"endpoint_id"`
	Endpoint      string `json:"endpoint"`
	EndpointState string `json:"endpoint_state"`
	Agent         string `json:"agent"`
	Human         string `json:"human"`
	Queue         string `json:"queue"`
	Pending       int64  `json:"pending"`
	Claimed       int64  `json:"claimed"`
	RetryWait     int64  `json:"retry_wait"`
	DeadLetter    int64  `json:"dead_letter"`
	// OldestPendingSeconds is nil when nothing is pending.
	OldestPendingSeconds *int64 `json:"oldest_pending_seconds"`
	Done24h              int64  `json:"done_24h"`
	Failed24h            int64  `json:"failed_24h"`
	Dead24h              int64  `json:"dead_24h"`
	Cancelled24h         int64  `json:"cancelled_24h"`
}

// ConsoleQueues: switchboard.console_queues.
func (s *Store) ConsoleQueues(ctx context.Context, v ConsoleHuman) ([]QueueRow, error) {
	var out []QueueRow
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_queues($1, $2)`, v.ID, v.Operator)
	return out, err
}

// TodoFilter narrows the todo list and the bulk actions; "" means any.
type TodoFilter struct {
	Queue    string
	State    string // pending, claimed, retry_wait, dead_letter, done, cancelled
	Text     string // in the title, case-insensitive
	Endpoint string
}

// TodoRow is a todo in the console's list.
type TodoRow struct {
	ID           string  `json:"id"`
	Queue        string  `json:"queue"`
	State        string  `json:"state"`
	ViewState    string  `json:"view_state"`
	Title        string  `json:"title"`
	Source       string  `json:"source"`
	Attempt      int     `json:"attempt"`
	MaxAttempts  int     `json:"max_attempts"`
	Owner        *string `json:"owner"`
	EndpointID   string  `json:"endpoint_id"`
	Endpoint     string  `json:"endpoint"`
	CreatedAt    string  `json:"created_at"`
	UpdatedAt    string  `json:"updated_at"`
	LeaseExpires *string `json:"lease_expires_at"`
	NextRetryAt  *string `json:"next_retry_at"`
	CompletedAt  *string `json:"completed_at"`
	PayloadSize  int     `json:"payload_size"`
}

// TodoPage is a page of the list and where the next one starts (nil: the last page).
type TodoPage struct {
	Todos []TodoRow `json:"todos"`
	Next  *struct {
		At string `json:"at"`
		ID string `json:"id"`
	} `json:"next"`
}

// ConsoleTodos: switchboard.console_todos, the page after (beforeAt, beforeID) when set.
func (s *Store) ConsoleTodos(ctx context.Context, v ConsoleHuman, f TodoFilter, beforeAt *time.Time, beforeID string, limit int) (TodoPage, error) {
	var out TodoPage
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_todos($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		v.ID, v.Operator, orNull(f.Queue), orNull(f.State), orNull(f.Text), orNull(f.Endpoint),
		beforeAt, orNull(beforeID), limit)
	return out, err
}

// TodoDetail is one todo with everything the detail screen shows.
type TodoDetail struct {
	TodoRow
	Kind           *string         `json:"kind"`
	Payload        json.RawMessage `json:"payload"`
	Routing        json.RawMessage `json:"routing"`
	Result         json.RawMessage `json:"result"`
	Agent          string          `json:"agent"`
	Human          string          `json:"human"`
	Redrives       int             `json:"redrives"`
	RedrivenAt     *string         `json:"redriven_at"`
	RedrivenBy     *string         `json:"redriven_by"`
	IdempotencyKey *string         `json:"idempotency_key"`
	ReadyAt        string          `json:"ready_at"`
	Delivery       *struct {
		ID          int64   `json:"id"`
		WebhookID   string  `json:"webhook_id"`
		Source      string  `json:"source"`
		EventType   *string `json:"event_type"`
		ReceivedAt  string  `json:"received_at"`
		Disposition string  `json:"disposition"`
		Visible     bool    `json:"visible"`
	} `json:"delivery"`
}

// ConsoleTodo: switchboard.console_todo (not_found for another human's, malformed or unknown id).
func (s *Store) ConsoleTodo(ctx context.Context, v ConsoleHuman, id string) (TodoDetail, error) {
	var out TodoDetail
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_todo($1, $2, $3)`, v.ID, v.Operator, id)
	return out, err
}

// ConsoleActionCount: how many todos ConsoleAct would take now (switchboard.console_action_count).
// ids non-nil: the selection; else the filter.
func (s *Store) ConsoleActionCount(ctx context.Context, v ConsoleHuman, action string, ids []string, f TodoFilter) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT switchboard.console_action_count($1, $2, $3, $4, $5, $6, $7, $8)`,
		v.ID, v.Operator, action, ids, orNull(f.Queue), orNull(f.State), orNull(f.Text), orNull(f.Endpoint)).Scan(&n)
	if err != nil {
		return 0, Classify(err)
	}
	return n, nil
}

// ConsoleAct redrives or cancels the selection (ids non-nil) or every todo matching the filter,
// in one call of switchboard.console_act, and returns how many it changed.
func (s *Store) ConsoleAct(ctx context.Context, v ConsoleHuman, action string, ids []string, f TodoFilter) (int64, error) {
	var out struct {
		Count int64 `json:"count"`
	}
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_act($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		v.ID, v.Operator, by(v), action, ids, orNull(f.Queue), orNull(f.State), orNull(f.Text), orNull(f.Endpoint))
	return out.Count, err
}

// ConsoleTodoAct redrives or cancels one todo (switchboard.console_todo_act): not_found, or
// conflict when its state does not allow it.
func (s *Store) ConsoleTodoAct(ctx context.Context, v ConsoleHuman, action, id string) error {
	_, err := s.jsonCall(ctx, `SELECT switchboard.console_todo_act($1, $2, $3, $4, $5)`,
		v.ID, v.Operator, by(v), action, id)
	return err
}

// ConsolePush pushes a todo (switchboard.console_push) and returns its id. payload nil: none.
func (s *Store) ConsolePush(ctx context.Context, v ConsoleHuman, endpoint, queue, title string, payload json.RawMessage) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	var p *string
	if payload != nil {
		ps := string(payload)
		p = &ps
	}
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_push($1, $2, $3, $4, $5, $6::jsonb)`,
		v.ID, v.Operator, endpoint, queue, title, p)
	return out.ID, err
}

// ChartBucket is one minute or hour of the home chart.
type ChartBucket struct {
	At     time.Time `json:"at"`
	Done   int64     `json:"done"`
	Failed int64     `json:"failed"`
	Dead   int64     `json:"dead"`
}

// Chart is the home chart's data: 60 minutes and 24 hours, oldest first.
type Chart struct {
	Through time.Time     `json:"through"`
	Minutes []ChartBucket `json:"minutes"`
	Hours   []ChartBucket `json:"hours"`
}

// ConsoleChart: switchboard.console_chart, read from the rollup.
func (s *Store) ConsoleChart(ctx context.Context, v ConsoleHuman) (Chart, error) {
	var out Chart
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_chart($1, $2)`, v.ID, v.Operator)
	return out, err
}

// ConsoleRollup calls switchboard.console_rollup until it has caught up (or budget ran out),
// each window its own statement, and returns how many finished todos it counted.
func (s *Store) ConsoleRollup(ctx context.Context, budget time.Duration) (int64, error) {
	var total int64
	deadline := time.Now().Add(budget)
	for {
		var n int64
		var more bool
		if err := s.pool.QueryRow(ctx, `SELECT counted, more FROM switchboard.console_rollup()`).Scan(&n, &more); err != nil {
			return total, Classify(err)
		}
		total += n
		if !more || time.Now().After(deadline) {
			return total, nil
		}
	}
}

// RefusalCounts are a webhook's refused deliveries by reason, and the last one.
type RefusalCounts struct {
	Total          int64 `json:"total"`
	BadSignature   int64 `json:"bad_signature"`
	StaleTimestamp int64 `json:"stale_timestamp"`
	TooLarge       int64 `json:"too_large"`
	Unparseable    int64 `json:"unparseable"`
	Last           *struct {
		At         string  `json:"at"`
		Reason     string  `json:"reason"`
		DeliveryID *string `json:"delivery_id"`
	} `json:"last"`
}

// ConsoleWebhook is a webhook on the console: never a secret. IngestToken makes its ingest URL.
type ConsoleWebhook struct {
	ID                  string        `json:"webhook_id"`
	IngestToken         string        `json:"ingest_token"`
	SourceType          string        `json:"source_type"`
	TargetQueue         string        `json:"target_queue"`
	TrustMode           string        `json:"trust_mode"`
	SecretSource        string        `json:"secret_source"`
	SecretIssuer        string        `json:"secret_issuer"`
	SecretSetAt         *string       `json:"secret_set_at"`
	PreviousSecretUntil *string       `json:"previous_secret_until"`
	CreatedAt           string        `json:"created_at"`
	EndpointID          string        `json:"endpoint_id"`
	Endpoint            string        `json:"endpoint"`
	Human               string        `json:"human"`
	LastDeliveryAt      *string       `json:"last_delivery_at"`
	Refusals            RefusalCounts `json:"refusals"`
	// Rules is rules_json (the list, default action, params, version, grant): one webhook only.
	Rules json.RawMessage `json:"rules"`
}

// ConsoleWebhooks: switchboard.console_webhooks.
func (s *Store) ConsoleWebhooks(ctx context.Context, v ConsoleHuman) ([]ConsoleWebhook, error) {
	var out []ConsoleWebhook
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_webhooks($1, $2)`, v.ID, v.Operator)
	return out, err
}

// ConsoleWebhook: switchboard.console_webhook, with its rules.
func (s *Store) ConsoleWebhook(ctx context.Context, v ConsoleHuman, id string) (ConsoleWebhook, error) {
	var out ConsoleWebhook
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_webhook($1, $2, $3)`, v.ID, v.Operator, id)
	return out, err
}

// LoggedDelivery is a stored delivery in the log; the detail fields only from ConsoleDelivery.
type LoggedDelivery struct {
	ID              int64   `json:"id"`
	WebhookID       string  `json:"webhook_id"`
	Source          string  `json:"source"`
	EventType       *string `json:"event_type"`
	TrustMode       string  `json:"trust_mode"`
	Verified        bool    `json:"verified"`
	Disposition     string  `json:"disposition"`
	Outcome         string  `json:"outcome"`
	PayloadSize     int     `json:"payload_size"`
	ReceivedAt      string  `json:"received_at"`
	Duplicates      int64   `json:"duplicates"`
	LastDuplicateAt *string `json:"last_duplicate_at"`
	Todos           []struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Queue string `json:"queue"`
	} `json:"todos"`
	OtherTodos   int64           `json:"other_todos"`
	VerifyDetail string          `json:"verify_detail"`
	ContentType  *string         `json:"content_type"`
	Headers      json.RawMessage `json:"headers"`
	Payload      json.RawMessage `json:"payload"`
	Routing      json.RawMessage `json:"routing"`
}

// DeliveryPage is a page of the log; Next is the id to page before (nil: the last page).
type DeliveryPage struct {
	Deliveries []LoggedDelivery `json:"deliveries"`
	Next       *int64           `json:"next"`
}

// ConsoleDeliveries: switchboard.console_deliveries, the page before beforeID when set.
func (s *Store) ConsoleDeliveries(ctx context.Context, v ConsoleHuman, webhook string, beforeID *int64, limit int) (DeliveryPage, error) {
	var out DeliveryPage
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_deliveries($1, $2, $3, $4, $5)`,
		v.ID, v.Operator, webhook, beforeID, limit)
	return out, err
}

// ConsoleDelivery: switchboard.console_delivery, one delivery with headers and payload.
func (s *Store) ConsoleDelivery(ctx context.Context, v ConsoleHuman, webhook, event string) (LoggedDelivery, error) {
	var out LoggedDelivery
	err := s.decodeCall(ctx, &out, `SELECT switchboard.console_delivery($1, $2, $3, $4)`,
		v.ID, v.Operator, webhook, event)
	return out, err
}

// ConsoleSetSecret puts a provider-issued secret in force (switchboard.console_webhook_set_secret,
// which calls webhook_set_secret as `switchboard webhook set-secret` does); the secret in force
// before keeps verifying for previousTTL (0: it stops now).
func (s *Store) ConsoleSetSecret(ctx context.Context, v ConsoleHuman, webhook, secret string, previousTTL time.Duration) error {
	var ttl *time.Duration
	if previousTTL > 0 {
		ttl = &previousTTL
	}
	_, err := s.jsonCall(ctx, `SELECT switchboard.console_webhook_set_secret($1, $2, $3, $4, $5)`,
		v.ID, v.Operator, webhook, secret, ttl)
	return err
}

// decodeCall runs one statement returning a jsonb value and decodes it into out.
func (s *Store) decodeCall(ctx context.Context, out any, sql string, args ...any) error {
	raw, err := s.jsonCall(ctx, sql, args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return Internal(err)
	}
	return nil
}
