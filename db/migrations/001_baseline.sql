-- Switchboard's state: the schema, its tables, indexes and constraints, and the fixed vocabularies.
--
-- Tables only. Every function, view and trigger is in the code package db/code/ (installed by
-- `switchboard migrate` after the migrations, in the same transaction), so this file is the
-- place to read the data model and db/code/ the place to read the logic. This baseline squashes
-- the twelve migrations of the first development cycle; a database made before it cannot be
-- upgraded and is created again. From here on, each schema change is a new migration.

CREATE SCHEMA IF NOT EXISTS switchboard;
COMMENT ON SCHEMA switchboard IS
  'Switchboard: durable todo queue, agent endpoints and webhook ingestion. Logic lives in the functions (\df+ switchboard.*).';

-- A queue name is a domain rather than a CHECK on todos.queue: PostgreSQL evaluates every table
-- CHECK on every UPDATE, whichever columns change, and no verb changes a queue; a domain is
-- checked only when a value is stored into the column. A violation is SQLSTATE 23514.
CREATE DOMAIN switchboard.queue_name AS text
    CHECK (VALUE ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$');
COMMENT ON DOMAIN switchboard.queue_name IS
  'A queue name: a letter or digit, then up to 127 of letters, digits and ._:-';

-- ---------------------------------------------------------------------------------------------
-- Vocabularies and tunables
-- ---------------------------------------------------------------------------------------------

-- Tunables read by the functions at call time. The keys, their ranges and their defaults are
-- declared in db/code/settings.sql (each install adds new keys); change a value with
-- `switchboard settings set` or switchboard.settings_set().
CREATE TABLE switchboard.settings (
    key         text PRIMARY KEY,
    value       numeric NOT NULL,
    min_value   numeric NOT NULL,
    max_value   numeric NOT NULL,
    integral    boolean NOT NULL,             -- whole numbers only
    description text NOT NULL,
    CHECK (value BETWEEN min_value AND max_value AND (NOT integral OR value = trunc(value)))
);
COMMENT ON TABLE switchboard.settings IS 'Queue tunables, read by the functions at call time.';

-- The stable error vocabulary shared by SQL and the wire. Functions raise these SQLSTATEs;
-- the Go server maps them back to the code, so psql and an agent see the same verdict.
CREATE TABLE switchboard.error_codes (
    code     text PRIMARY KEY,
    sqlstate text NOT NULL UNIQUE CHECK (sqlstate ~ '^SB[0-9A-Z]{3}$'),
    meaning  text NOT NULL
);
COMMENT ON TABLE switchboard.error_codes IS 'Domain refusals: wire code <-> SQLSTATE raised by the functions.';

INSERT INTO switchboard.error_codes (code, sqlstate, meaning) VALUES
    ('invalid_argument',      'SB400', 'bad input'),
    ('forbidden',             'SB403', 'outside the endpoint scope or grant'),
    ('not_found',             'SB404', 'unknown id, or an id of another tenant (indistinguishable)'),
    ('conflict',              'SB409', 'wrong state, lost race, not the holder, bad fence token'),
    ('stale',                 'SB412', 'the receiver routed a delivery with rules that changed since; it reads them again (never on the wire)'),
    ('ceiling_exceeded',      'SB421', 'webhook count at the ceiling max'),
    ('forbidden_source_type', 'SB422', 'webhook source type outside the ceiling'),
    ('rule_not_found',        'SB441', 'unknown rule id'),
    ('invalid_expression',    'SB442', 'jq expression does not parse or uses a foreign variable'),
    ('forbidden_function',    'SB443', 'jq expression uses a forbidden function'),
    ('invalid_rule',          'SB444', 'rule shape is invalid'),
    ('too_many_rules',        'SB445', 'more than 32 rules'),
    ('invalid_params',        'SB446', 'rule params are not a small JSON object'),
    ('no_targets',            'SB503', 'a delivery has no live target; the producer should retry (HTTP 503)');

-- The verb vocabulary an endpoint's allowlist draws from.
CREATE TABLE switchboard.verbs (
    name   text PRIMARY KEY,
    family text NOT NULL CHECK (family IN ('todo', 'webhook', 'route', 'rule', 'event'))
);
COMMENT ON TABLE switchboard.verbs IS 'MCP tool names an endpoint may be granted.';

INSERT INTO switchboard.verbs (name, family) VALUES
    ('list_todos', 'todo'), ('get_todo', 'todo'), ('claim', 'todo'), ('claim_next', 'todo'),
    ('complete', 'todo'), ('fail', 'todo'), ('heartbeat', 'todo'), ('release', 'todo'),
    ('create_webhook', 'webhook'), ('list_webhooks', 'webhook'), ('rotate_webhook', 'webhook'),
    ('delete_webhook', 'webhook'),
    ('add_webhook_route', 'route'), ('list_webhook_routes', 'route'), ('remove_webhook_route', 'route'),
    ('list_webhook_rules', 'rule'), ('set_webhook_rules', 'rule'), ('add_webhook_rule', 'rule'),
    ('update_webhook_rule', 'rule'), ('move_webhook_rule', 'rule'), ('remove_webhook_rule', 'rule'),
    ('test_webhook_rules', 'rule'),
    ('list_webhook_events', 'event'), ('get_webhook_event', 'event');

-- ---------------------------------------------------------------------------------------------
-- Identity: humans own agents, agents are vended endpoints, friend edges run between humans
-- ---------------------------------------------------------------------------------------------

CREATE TABLE switchboard.humans (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name       text NOT NULL UNIQUE CHECK (name ~ '^[^[:space:][:cntrl:]][^[:cntrl:]]{0,127}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE switchboard.humans IS 'Principals. Own agents; friend edges run between them.';

CREATE TABLE switchboard.agents (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_human_id uuid NOT NULL REFERENCES switchboard.humans,
    name           text NOT NULL CHECK (name ~ '^[^[:space:][:cntrl:]][^[:cntrl:]]{0,127}$'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner_human_id, name)
);
COMMENT ON TABLE switchboard.agents IS 'Worker identities; on todos they appear as owner agent:<id>.';

CREATE TABLE switchboard.endpoints (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    agent_id          uuid NOT NULL REFERENCES switchboard.agents,
    slug              text NOT NULL UNIQUE,
    credential_hash   bytea NOT NULL UNIQUE,          -- sha256 of the bearer credential
    credential_prefix text NOT NULL,                  -- for display only
    state             text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'revoked')),
    queues            text[] NOT NULL CHECK (cardinality(queues) > 0),
    verbs             text[] NOT NULL,
    webhook_max       int NOT NULL DEFAULT 0 CHECK (webhook_max >= 0),
    webhook_sources   text[] NOT NULL DEFAULT '{}',
    webhook_queues    text[] NOT NULL DEFAULT '{}',
    lease_ttl_seconds int CHECK (lease_ttl_seconds BETWEEN 1 AND 86400),
    created_at        timestamptz NOT NULL DEFAULT now(),
    revoked_at        timestamptz
);
COMMENT ON TABLE switchboard.endpoints IS
  'What a human vends to an agent: /mcp/{slug} plus a bearer credential, with an immutable scope.';

CREATE TABLE switchboard.friend_edges (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    from_human uuid NOT NULL REFERENCES switchboard.humans,
    to_human   uuid NOT NULL REFERENCES switchboard.humans,
    state      text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'approved', 'denied', 'revoked')),
    created_at timestamptz NOT NULL DEFAULT now(),
    decided_at timestamptz,
    CHECK (from_human <> to_human)
);
COMMENT ON TABLE switchboard.friend_edges IS
  'from_human may deliver work into to_human''s endpoints once approved. Per direction, non-transitive.';
-- At most one live edge per ordered pair.
CREATE UNIQUE INDEX friend_edges_live ON switchboard.friend_edges (from_human, to_human)
    WHERE state IN ('pending', 'approved');

-- One row: when the doorbell last sent a NOTIFY (coalescing, see switchboard.ring).
CREATE TABLE switchboard.doorbell (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    signalled_at timestamptz NOT NULL DEFAULT '-infinity'
);
COMMENT ON TABLE switchboard.doorbell IS 'When the last doorbell NOTIFY was sent; lets busy databases coalesce signals.';
INSERT INTO switchboard.doorbell DEFAULT VALUES;

-- ---------------------------------------------------------------------------------------------
-- Webhooks: sources agents create, extra delivery targets, and every accepted delivery
-- ---------------------------------------------------------------------------------------------

CREATE TABLE switchboard.webhooks (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    endpoint_id    uuid NOT NULL REFERENCES switchboard.endpoints,   -- the owning endpoint
    source_type    text NOT NULL CHECK (source_type IN ('github', 'gitea', 'stripe', 'slack', 'cairn', 'generic')),
    trust_mode     text NOT NULL CHECK (trust_mode IN ('signed', 'token')),
    target_queue   text NOT NULL,
    ingest_token   text UNIQUE,          -- null once deleted
    signing_secret text,                 -- plaintext: the receiver recomputes the HMAC
    rules          jsonb NOT NULL DEFAULT '[]',
    default_action jsonb,
    rule_params    jsonb NOT NULL DEFAULT '{}',
    rules_version  bigint NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    rotated_at     timestamptz,
    deleted_at     timestamptz,
    CHECK ((source_type = 'generic') = (trust_mode = 'token')),
    CHECK ((deleted_at IS NULL) = (ingest_token IS NOT NULL))
);
COMMENT ON TABLE switchboard.webhooks IS 'Ingestion sources created by agents within their endpoint ceiling.';
CREATE INDEX webhooks_endpoint ON switchboard.webhooks (endpoint_id) WHERE deleted_at IS NULL;

CREATE TABLE switchboard.webhook_routes (
    webhook_id         uuid NOT NULL REFERENCES switchboard.webhooks,
    target_endpoint_id uuid NOT NULL REFERENCES switchboard.endpoints,
    granted_by         uuid NOT NULL REFERENCES switchboard.endpoints,
    granted_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (webhook_id, target_endpoint_id)
);
COMMENT ON TABLE switchboard.webhook_routes IS 'Extra target endpoints of a webhook (fan-out, one todo per target).';

CREATE TABLE switchboard.webhook_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    webhook_id    uuid NOT NULL REFERENCES switchboard.webhooks,
    source        text NOT NULL,
    event_type    text,
    trust_mode    text NOT NULL CHECK (trust_mode IN ('signed', 'token')),
    verified      boolean NOT NULL,
    verify_detail text NOT NULL,
    content_type  text,
    payload_size  int NOT NULL,
    payload       jsonb,
    headers       jsonb NOT NULL DEFAULT '{}',
    delivery_key  text NOT NULL,
    disposition   text NOT NULL CHECK (disposition IN ('delivered', 'dropped', 'faulted')),
    routing       jsonb,
    received_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (verified = false OR trust_mode = 'signed'),
    UNIQUE (webhook_id, delivery_key)
);
COMMENT ON TABLE switchboard.webhook_events IS 'Every accepted delivery, deduplicated on (webhook, delivery key).';

-- ---------------------------------------------------------------------------------------------
-- The queue
-- ---------------------------------------------------------------------------------------------

CREATE TABLE switchboard.todos (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    endpoint_id      uuid NOT NULL REFERENCES switchboard.endpoints,   -- the tenant
    queue            switchboard.queue_name NOT NULL,
    title            text NOT NULL DEFAULT '',
    source           text NOT NULL DEFAULT 'operator',
    kind             text,
    payload          jsonb,
    payload_size     int NOT NULL DEFAULT 0,
    routing          jsonb,
    event_id         bigint REFERENCES switchboard.webhook_events,
    state            text NOT NULL DEFAULT 'pending',
    owner            text,
    lease_expires_at timestamptz,
    lease_token_hash bytea,
    attempt          int NOT NULL DEFAULT 0,
    max_attempts     int NOT NULL,
    next_retry_at    timestamptz,           -- set: parked retry; null on a failed row: dead letter
    result           jsonb,
    idempotency_key  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    ready_at         timestamptz NOT NULL DEFAULT now(),   -- last time it became pending
    updated_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    -- The state machine's shape in one CHECK (PostgreSQL evaluates each CHECK on every UPDATE,
    -- so one is cheaper than five): a lease exactly while claimed (with an owner), a retry time
    -- only on a failed row (set: parked retry; null: dead letter).
    CONSTRAINT todos_shape CHECK (max_attempts >= 1 AND CASE state
        WHEN 'pending' THEN lease_expires_at IS NULL AND next_retry_at IS NULL
        WHEN 'claimed' THEN lease_expires_at IS NOT NULL AND owner IS NOT NULL AND next_retry_at IS NULL
        WHEN 'done'    THEN lease_expires_at IS NULL AND next_retry_at IS NULL
        WHEN 'failed'  THEN lease_expires_at IS NULL
        ELSE false
    END)
);
COMMENT ON TABLE switchboard.todos IS
  'The durable queue. State machine: pending -> claimed -> done | failed (parked retry or dead letter).';

-- Claim path: only pending rows, in claim order, so scans never touch the terminal backlog.
-- Entries exist only while a todo is pending: claims and completions do not maintain them. The
-- queue is not a key column: an index cannot return (created_at, id) order under
-- `queue = ANY(...)` on a second column, and an endpoint's pending rows are mostly in its
-- granted queues anyway; a one-queue claim filters the others out while walking.
CREATE INDEX todos_claimable ON switchboard.todos (endpoint_id, created_at, id) WHERE state = 'pending';
-- Takeover and reaper paths: in-flight leases only, keyed by deadline. Partial on its own key,
-- not on state = 'claimed': holds() says state = 'claimed' too, and a generic plan of complete
-- could then pick this index over the primary key and walk every lease entry to find one id.
-- A deadline comparison implies the predicate; an id lookup does not.
CREATE INDEX todos_leases ON switchboard.todos (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX todos_retries ON switchboard.todos (next_retry_at) WHERE next_retry_at IS NOT NULL;
-- Doorbell path: which pending todos of an endpoint became ready recently.
CREATE INDEX todos_ready ON switchboard.todos (endpoint_id, ready_at) WHERE state = 'pending';
-- list_todos: newest first per endpoint.
CREATE INDEX todos_recent ON switchboard.todos (endpoint_id, created_at DESC);
-- Idempotency over live rows only: done and dead-lettered rows free the key, a parked retry keeps it.
CREATE UNIQUE INDEX todos_idempotency ON switchboard.todos (endpoint_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND (state IN ('pending', 'claimed') OR next_retry_at IS NOT NULL);
CREATE INDEX todos_event ON switchboard.todos (event_id) WHERE event_id IS NOT NULL;
