-- MCP Events (issue 35, SEP-3415): the tables; the functions are in db/code/events.sql.
--
-- Order. Every event has a position (xact, seq): the id of the transaction that wrote it
-- (pg_current_xact_id()) and a sequence value. Readers take only rows whose xact is below the
-- xmin of their snapshot: every transaction below it has ended, so no row can still commit
-- there, and a cursor never steps past a row that commits later. A sequence value alone cannot
-- do that: transactions take them in one order and commit in another.

-- webhook.delivery is derived from the deliveries ingest already stores: one column, set by
-- its default at insert. Nullable without a default first, so the ALTER does not rewrite the
-- table; rows from before it have no position and are never events.
ALTER TABLE switchboard.webhook_events ADD COLUMN xact xid8;
ALTER TABLE switchboard.webhook_events ALTER COLUMN xact SET DEFAULT pg_current_xact_id();
CREATE INDEX webhook_events_xact ON switchboard.webhook_events (xact, id) WHERE xact IS NOT NULL;

-- todo.claimable: written by events_record() (a maintenance tick), never by the queue verbs.
CREATE SEQUENCE switchboard.event_seq;
CREATE TABLE switchboard.event_log (
    xact        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq         bigint NOT NULL DEFAULT nextval('switchboard.event_seq'),
    kind        text NOT NULL CHECK (kind IN ('todo.claimable')),
    event_id    text NOT NULL UNIQUE,
    endpoint_id uuid NOT NULL REFERENCES switchboard.endpoints ON DELETE CASCADE,
    queue       text NOT NULL,
    todo_id     uuid NOT NULL,
    occurred_at timestamptz NOT NULL,
    data        jsonb NOT NULL,
    PRIMARY KEY (xact, seq)
);
CREATE INDEX event_log_endpoint ON switchboard.event_log (endpoint_id, xact, seq);
CREATE INDEX event_log_occurred ON switchboard.event_log (occurred_at);
COMMENT ON TABLE switchboard.event_log IS
  'MCP Events: todo.claimable occurrences, ordered by (xact, seq); webhook.delivery is read from webhook_events.';

-- The recorder's window: todos that became ready at or after mark are looked at. mark moves to
-- the previous tick's time only once every transaction in flight at that tick has ended.
CREATE TABLE switchboard.event_recorder (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    mark         timestamptz NOT NULL DEFAULT now(),
    next_mark    timestamptz NOT NULL DEFAULT now(),
    next_xmax    xid8 NOT NULL DEFAULT pg_current_xact_id()
);
INSERT INTO switchboard.event_recorder DEFAULT VALUES;

-- Webhook subscriptions (events/subscribe). The secret is the client's whsec_ value, kept as
-- the webhooks' signing secrets are (the sender recomputes the HMAC); never in a view or a log.
CREATE TABLE switchboard.event_hooks (
    id               text PRIMARY KEY,          -- sub_<hex>, derived from the key below
    endpoint_id      uuid NOT NULL REFERENCES switchboard.endpoints ON DELETE CASCADE,
    name             text NOT NULL,
    arguments        jsonb NOT NULL,
    url              text NOT NULL,
    secret           text NOT NULL,
    previous_secret  text,                      -- dual-signing after a rotation, until previous_until
    previous_until   timestamptz,
    pos_xact         xid8 NOT NULL,             -- fanned out into the outbox through this position
    pos_seq          bigint NOT NULL,
    refresh_before   timestamptz NOT NULL,
    active           boolean NOT NULL DEFAULT true,
    last_delivery_at timestamptz,
    last_error       text CHECK (last_error IN ('connection_refused', 'timeout', 'tls_error', 'http_4xx',
                                                'http_5xx', 'challenge_failed')),
    failed_since     timestamptz,
    failures         int NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    refreshed_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (endpoint_id, url, name, arguments)
);
CREATE INDEX event_hooks_name ON switchboard.event_hooks (name, endpoint_id);
COMMENT ON TABLE switchboard.event_hooks IS
  'MCP Events webhook subscriptions, keyed by (endpoint, url, name, arguments).';

-- Callback URLs that answered the verification challenge, per endpoint.
CREATE TABLE switchboard.event_callbacks (
    endpoint_id uuid NOT NULL REFERENCES switchboard.endpoints ON DELETE CASCADE,
    url         text NOT NULL,
    verified_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint_id, url)
);

-- The outbox: one row per (subscription, event) still to send; any server drains it with
-- FOR UPDATE SKIP LOCKED. A taken row's next_at moves ahead by a lease, so a sender that dies
-- mid-POST leaves it to be sent again (with the same webhook-id) by another.
CREATE TABLE switchboard.event_outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hook_id     text NOT NULL,
    message_id  text NOT NULL,             -- webhook-id: the eventId, or msg_<type>_<random>
    xact        xid8,                      -- the event's position (NULL: a control envelope)
    seq         bigint,
    body        jsonb NOT NULL,            -- without cursor: the watermark is added when sent
    url         text,                      -- a terminated envelope's own copy (its hook is gone)
    secret      text,
    attempts    int NOT NULL DEFAULT 0,
    next_at     timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (hook_id, message_id)
);
CREATE INDEX event_outbox_due ON switchboard.event_outbox (next_at);
CREATE INDEX event_outbox_hook ON switchboard.event_outbox (hook_id, xact, seq);

-- Endpoints that use events: the recorder writes todo.claimable only for these (a poll or a
-- subscription within the retention window), so endpoints that never ask cost nothing.
CREATE TABLE switchboard.event_interest (
    endpoint_id uuid PRIMARY KEY REFERENCES switchboard.endpoints ON DELETE CASCADE,
    seen_at     timestamptz NOT NULL DEFAULT now()
);
