package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"switchboard/db"
)

// Operator is the operator CLI's view of the database (cmd/switchboard, contract §8): one
// connection as the URL's login (not RuntimeRole: operator functions and the tables the CLI
// reads are not granted to the server). Most methods answer a function's jsonb as it is. Errors
// are the driver's, unclassified: the CLI reports a domain refusal (SQLSTATE class SB) with its
// own exit status, and a missing row as pgx.ErrNoRows.
type Operator struct {
	conn *pgx.Conn
}

// ConnectOperator opens the CLI's connection.
func ConnectOperator(ctx context.Context, url string) (*Operator, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	return &Operator{conn: conn}, nil
}

// Close closes the connection.
func (o *Operator) Close() error { return o.conn.Close(context.Background()) }

func (o *Operator) json(ctx context.Context, sql string, args ...any) ([]byte, error) {
	var raw []byte
	if err := o.conn.QueryRow(ctx, sql, args...).Scan(&raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// Migrate applies the pending migrations and installs the code package (db.MigrateWith, whose
// SQL lives in db/) on this connection.
func (o *Operator) Migrate(ctx context.Context, opts db.Options) (db.Result, error) {
	return db.MigrateWith(ctx, o.conn, opts)
}

// BaseURL is the public URL the running server recorded (switchboard.public_url); ok is false
// before the first serve (or the first migration).
func (o *Operator) BaseURL(ctx context.Context) (url string, ok bool) {
	return url, o.conn.QueryRow(ctx, `SELECT base_url FROM switchboard.public_url`).Scan(&url) == nil
}

// HumanAdd: switchboard.human_add.
func (o *Operator) HumanAdd(ctx context.Context, name string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.human_add($1)`, name)
}

// HumanSetOperator: switchboard.human_set_operator.
func (o *Operator) HumanSetOperator(ctx context.Context, name string, operator bool) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.human_set_operator($1, $2)`, name, operator)
}

// ConsoleInviteCreate: switchboard.console_invite_create — a one-time console sign-in link's
// token, as its sha256, for ttl.
func (o *Operator) ConsoleInviteCreate(ctx context.Context, human string, tokenHash []byte, ttl time.Duration) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.console_invite_create($1, $2, $3)`, human, tokenHash, ttl)
}

// HumanExists reports whether a human of that name exists (ok false: the read failed).
func (o *Operator) HumanExists(ctx context.Context, name string) (exists, ok bool) {
	ok = o.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM switchboard.humans WHERE name = $1)`, name).Scan(&exists) == nil
	return exists, ok
}

// Vend is what switchboard.endpoint_vend takes: the credential only as its sha256 and display
// prefix.
type Vend struct {
	Human, Agent     string
	CredentialHash   []byte
	CredentialPrefix string
	Queues           []string
	Verbs            []string // nil: every verb
	WebhookMax       int32
	WebhookSources   []string
	WebhookQueues    []string
	LeaseTTL         *int32 // nil: the setting lease_default_seconds
}

// EndpointVend: switchboard.endpoint_vend.
func (o *Operator) EndpointVend(ctx context.Context, v Vend) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.endpoint_vend($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		v.Human, v.Agent, v.CredentialHash, v.CredentialPrefix, v.Queues, v.Verbs, v.WebhookMax,
		v.WebhookSources, v.WebhookQueues, v.LeaseTTL)
}

// EndpointList: switchboard.endpoint_list; nil human: every endpoint.
func (o *Operator) EndpointList(ctx context.Context, human *string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.endpoint_list($1)`, human)
}

// EndpointRevoke: switchboard.endpoint_revoke of an endpoint by id or slug.
func (o *Operator) EndpointRevoke(ctx context.Context, endpoint string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.endpoint_revoke(switchboard.endpoint_id($1))`, endpoint)
}

// EndpointRotate: switchboard.endpoint_rotate — a new credential (its hash and prefix); the
// old one stays valid for grace (nil: it stops at once).
func (o *Operator) EndpointRotate(ctx context.Context, endpoint string, hash []byte, prefix string, grace *time.Duration) ([]byte, error) {
	var graceArg any // nil: no grace
	if grace != nil {
		graceArg = *grace
	}
	return o.json(ctx, `SELECT switchboard.endpoint_rotate(switchboard.endpoint_id($1), $2, $3, $4::interval)`,
		endpoint, hash, prefix, graceArg)
}

// EndpointQueues is the id of an endpoint (by id or slug) and its granted queues.
func (o *Operator) EndpointQueues(ctx context.Context, endpoint string) (id string, queues []string, err error) {
	err = o.conn.QueryRow(ctx,
		`SELECT e.id::text, e.queues FROM switchboard.endpoints e WHERE e.id = switchboard.endpoint_id($1)`,
		endpoint).Scan(&id, &queues)
	return id, queues, err
}

// OAuthApprovalMint: switchboard.oauth_approval_mint for an endpoint (by id or slug), with the
// endpoint's slug added.
func (o *Operator) OAuthApprovalMint(ctx context.Context, endpoint string, codeHash []byte, ttl time.Duration) ([]byte, error) {
	return o.json(ctx,
		`SELECT switchboard.oauth_approval_mint(e.id, $2, $3) || jsonb_build_object('slug', e.slug)
		   FROM switchboard.endpoints e WHERE e.id = switchboard.endpoint_id($1)`, endpoint, codeHash, ttl)
}

// OAuthGrantList: switchboard.oauth_grant_list of an endpoint (by id or slug).
func (o *Operator) OAuthGrantList(ctx context.Context, endpoint string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.oauth_grant_list(switchboard.endpoint_id($1))`, endpoint)
}

// OAuthGrantRevoke: switchboard.oauth_grant_revoke.
func (o *Operator) OAuthGrantRevoke(ctx context.Context, grant string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.oauth_grant_revoke($1::uuid)`, grant)
}

// FriendRequest: switchboard.friend_request.
func (o *Operator) FriendRequest(ctx context.Context, from, to string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.friend_request($1, $2)`, from, to)
}

// FriendDecide: switchboard.friend_decide.
func (o *Operator) FriendDecide(ctx context.Context, edge, state string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.friend_decide($1::uuid, $2)`, edge, state)
}

// FriendState is the state of a friend edge (ok false: no such edge, or the read failed).
func (o *Operator) FriendState(ctx context.Context, edge string) (state string, ok bool) {
	return state, o.conn.QueryRow(ctx, `SELECT state FROM switchboard.friend_edges WHERE id = $1::uuid`, edge).Scan(&state) == nil
}

// FriendList: switchboard.friend_list; nil human: every edge.
func (o *Operator) FriendList(ctx context.Context, human *string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.friend_list($1)`, human)
}

// WebhookSetSecret: switchboard.webhook_set_secret; the secret in force before keeps verifying
// for previousTTL (nil: it stops at once).
func (o *Operator) WebhookSetSecret(ctx context.Context, webhook, secret string, previousTTL *time.Duration) ([]byte, error) {
	var ttlArg any // nil: the old secret stops at once
	if previousTTL != nil {
		ttlArg = *previousTTL
	}
	return o.json(ctx, `SELECT switchboard.webhook_set_secret($1, $2, $3::interval)`, webhook, secret, ttlArg)
}

// WebhookAdminList: switchboard.webhook_admin_list; nil human: every webhook.
func (o *Operator) WebhookAdminList(ctx context.Context, human *string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.webhook_admin_list($1)`, human)
}

// WebhookCreateGeneric: switchboard.webhook_create of a generic (token) webhook with no signing
// secret; returns its id.
func (o *Operator) WebhookCreateGeneric(ctx context.Context, endpoint, queue, ingestToken string) (id string, err error) {
	err = o.conn.QueryRow(ctx, `SELECT switchboard.webhook_create($1, 'generic', $2, $3, NULL) ->> 'webhook_id'`,
		endpoint, queue, ingestToken).Scan(&id)
	return id, err
}

// DemoEndpoint is the demo's endpoint found again: id, slug, and its oldest live generic
// webhook.
type DemoEndpoint struct {
	ID, Slug, WebhookID string
	IngestToken         *string
}

// FindDemoEndpoint finds the newest active endpoint of human/agent granted exactly queue, and
// its oldest live generic webhook; ok is false when there is none.
func (o *Operator) FindDemoEndpoint(ctx context.Context, human, agent, queue string) (d DemoEndpoint, ok bool, err error) {
	err = o.conn.QueryRow(ctx, `
		SELECT e.id::text, e.slug,
		       (SELECT w.id::text FROM switchboard.webhooks w
		         WHERE w.endpoint_id = e.id AND w.source_type = 'generic' AND w.deleted_at IS NULL
		         ORDER BY w.created_at LIMIT 1),
		       (SELECT w.ingest_token FROM switchboard.webhooks w
		         WHERE w.endpoint_id = e.id AND w.source_type = 'generic' AND w.deleted_at IS NULL
		         ORDER BY w.created_at LIMIT 1)
		  FROM switchboard.endpoints e
		  JOIN switchboard.agents a ON a.id = e.agent_id
		  JOIN switchboard.humans h ON h.id = a.owner_human_id
		 WHERE h.name = $1 AND a.name = $2 AND e.state = 'active' AND e.queues = ARRAY[$3]
		 ORDER BY e.created_at DESC LIMIT 1`, human, agent, queue).
		Scan(&d.ID, &d.Slug, &d.WebhookID, &d.IngestToken)
	if errors.Is(err, pgx.ErrNoRows) {
		return DemoEndpoint{}, false, nil
	}
	if err != nil {
		return DemoEndpoint{}, false, err
	}
	return d, true, nil
}

// RecentTodosSQL is the query the demo suggests running in psql to see the newest todos.
const RecentTodosSQL = `SELECT id, queue, state, title FROM switchboard.todos ORDER BY created_at DESC LIMIT 5`

// CreateTodo: switchboard.create_todo — operator-authored work, the path webhook deliveries
// take. payload (JSON text) and key may be nil.
func (o *Operator) CreateTodo(ctx context.Context, endpointID, queue, title string, payload, key *string) (id string, created bool, err error) {
	var payloadArg, keyArg any // nil: SQL NULL
	if payload != nil {
		payloadArg = *payload
	}
	if key != nil {
		keyArg = *key
	}
	err = o.conn.QueryRow(ctx,
		`SELECT todo_id::text, created FROM switchboard.create_todo($1::uuid, $2, $3, $4::jsonb, $5)`,
		endpointID, queue, title, payloadArg, keyArg).Scan(&id, &created)
	return id, created, err
}

// PushMany: switchboard.push_many — a pending todo for each of items, a JSON array of {title,
// payload?, key?}, in one statement, all or nothing: {"created": N, "ids": [...]}, one id per
// item.
func (o *Operator) PushMany(ctx context.Context, endpointID, queue string, items json.RawMessage) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.push_many($1, $2, $3)`, endpointID, queue, string(items))
}

// DeadLetters lists an endpoint's dead letters (by id or slug), newest first, at most limit,
// as a JSON array; nil queue: every queue.
func (o *Operator) DeadLetters(ctx context.Context, endpoint string, queue *string, limit int) ([]byte, error) {
	return o.json(ctx, `
		SELECT coalesce(jsonb_agg(jsonb_build_object(
		         'id', d.id, 'slug', d.slug, 'queue', d.queue, 'title', d.title, 'owner', d.owner,
		         'attempt', d.attempt, 'max_attempts', d.max_attempts, 'result', d.result,
		         'dead_at', switchboard.rfc3339(d.completed_at), 'redrives', d.redrives,
		         'redriven_at', switchboard.rfc3339(d.redriven_at), 'redriven_by', d.redriven_by)
		         ORDER BY d.completed_at DESC, d.id), '[]')
		  FROM (SELECT * FROM switchboard.dead_letters
		         WHERE endpoint_id = switchboard.endpoint_id($1) AND ($2::text IS NULL OR queue = $2)
		         ORDER BY completed_at DESC, id LIMIT $3) d`, endpoint, queue, limit)
}

// Redrive is what switchboard.redrive takes: one todo, or the dead letters of an endpoint (by
// id or slug) in a queue, optionally only those dead since a time.
type Redrive struct {
	Todo     *string
	Endpoint *string
	Queue    *string
	Since    *time.Time
	By       string
}

// Redrive: switchboard.redrive.
func (o *Operator) Redrive(ctx context.Context, r Redrive) ([]byte, error) {
	return o.json(ctx, `
		SELECT switchboard.redrive(p_todo => $1::uuid,
		         p_endpoint => CASE WHEN $2::text IS NOT NULL THEN switchboard.endpoint_id($2) END,
		         p_queue => $3, p_since => $4::timestamptz, p_by => $5)`,
		r.Todo, r.Endpoint, r.Queue, r.Since, r.By)
}

// Cancel: switchboard.cancel.
func (o *Operator) Cancel(ctx context.Context, todo, by string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.cancel($1::uuid, $2)`, todo, by)
}

// PurgeBatch is one batch of switchboard.purge: what it deleted (or would) and whether more is
// past retention.
type PurgeBatch struct {
	TodosDone, TodosDead, Events int64
	More                         bool
}

// Purge runs one batch of switchboard.purge (dryRun: count only).
func (o *Operator) Purge(ctx context.Context, dryRun bool) (b PurgeBatch, err error) {
	err = o.conn.QueryRow(ctx, `SELECT todos_done, todos_dead, events, more FROM switchboard.purge($1)`, dryRun).
		Scan(&b.TodosDone, &b.TodosDead, &b.Events, &b.More)
	return b, err
}

// Reap: switchboard.reap().
func (o *Operator) Reap(ctx context.Context) (r ReapResult, err error) {
	err = o.conn.QueryRow(ctx, `SELECT requeued, dead_lettered, retries_released FROM switchboard.reap()`).
		Scan(&r.Requeued, &r.DeadLettered, &r.RetriesReleased)
	return r, err
}

// Settings: switchboard.settings_json().
func (o *Operator) Settings(ctx context.Context) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.settings_json()`)
}

// SettingsSet: switchboard.settings_set; value is a number's text.
func (o *Operator) SettingsSet(ctx context.Context, key, value string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.settings_set($1, $2::numeric)`, key, value)
}

// SettingKeysUnless lists every setting's key, sorted, unless key is one of them (then none).
func (o *Operator) SettingKeysUnless(ctx context.Context, key string) (keys []string, ok bool) {
	ok = o.conn.QueryRow(ctx,
		`SELECT array_agg(key ORDER BY key) FROM switchboard.settings WHERE NOT EXISTS (SELECT 1 FROM switchboard.settings WHERE key = $1)`,
		key).Scan(&keys) == nil
	return keys, ok
}

// EventSubscriptions: switchboard.events_hooks_list — MCP Events webhook subscriptions (of one
// endpoint, by id or slug, when given), never their secrets.
func (o *Operator) EventSubscriptions(ctx context.Context, endpoint *string) ([]byte, error) {
	return o.json(ctx, `SELECT switchboard.events_hooks_list(CASE WHEN $1::text IS NULL THEN NULL ELSE switchboard.endpoint_id($1) END)`, endpoint)
}
