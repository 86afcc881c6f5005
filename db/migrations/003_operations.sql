-- Running it for real: the cancelled state, the redrive record, the purge indexes, credential
-- rotation and the public URL the server serves. The functions are in db/code (retention.sql,
-- queue.sql, identity.sql, views.sql); the retention settings in db/code/settings.sql.

-- cancelled: a terminal state an operator chooses; never claimable, retained like done.
ALTER TABLE switchboard.todos
    DROP CONSTRAINT todos_shape,
    ADD CONSTRAINT todos_shape CHECK (max_attempts >= 1 AND CASE state
        WHEN 'pending'   THEN lease_expires_at IS NULL AND next_retry_at IS NULL
        WHEN 'claimed'   THEN lease_expires_at IS NOT NULL AND owner IS NOT NULL AND next_retry_at IS NULL
        WHEN 'done'      THEN lease_expires_at IS NULL AND next_retry_at IS NULL
        WHEN 'cancelled' THEN lease_expires_at IS NULL AND next_retry_at IS NULL
        WHEN 'failed'    THEN lease_expires_at IS NULL
        ELSE false
    END),
    -- Redrive history: how often, when last, and by whom (operator:<user> or dba:<role>).
    ADD COLUMN redrives    int NOT NULL DEFAULT 0,
    ADD COLUMN redriven_at timestamptz,
    ADD COLUMN redriven_by text;
COMMENT ON TABLE switchboard.todos IS
  'The durable queue. State machine: pending -> claimed -> done | failed (parked retry or dead letter); pending or failed -> cancelled (operator).';

-- Purge paths: the terminal rows by age, so a batch reads only what it deletes.
CREATE INDEX todos_finished ON switchboard.todos (completed_at) WHERE state IN ('done', 'cancelled');
CREATE INDEX todos_dead ON switchboard.todos (completed_at) WHERE state = 'failed' AND next_retry_at IS NULL;
CREATE INDEX webhook_events_received ON switchboard.webhook_events (received_at);

-- Credential rotation: the previous credential stays valid until old_credential_until (grace).
ALTER TABLE switchboard.endpoints
    ADD COLUMN old_credential_hash  bytea UNIQUE,
    ADD COLUMN old_credential_until timestamptz,
    ADD COLUMN rotated_at           timestamptz,
    ADD CONSTRAINT endpoints_old_credential CHECK ((old_credential_hash IS NULL) = (old_credential_until IS NULL));

-- The public base URL the running server serves (SWITCHBOARD_BASE_URL, or made from its
-- listen address), recorded at start so the CLI prints URLs that work.
CREATE TABLE switchboard.public_url (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    base_url    text NOT NULL CHECK (base_url ~ '^https?://'),
    recorded_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE switchboard.public_url IS
  'The base URL the last started server serves; the CLI builds mcp_url and ingest URLs from it.';
