-- The human console (server/console, issue 36): humans sign in with passkeys. An invite link is
-- the way to a first (or another) passkey; a session is a row here, found by the sha256 of its
-- cookie. Every secret (invite token, session id) is stored as its sha256 only. The functions
-- are in db/code/console_auth.sql and db/code/console.sql.

-- An operator human sees every human's rows in the console; everyone else only their own.
ALTER TABLE switchboard.humans ADD COLUMN operator boolean NOT NULL DEFAULT false;

-- One-time sign-in links (switchboard human invite): one use, a deadline.
CREATE TABLE switchboard.console_invites (
    token_hash bytea PRIMARY KEY CHECK (octet_length(token_hash) = 32),
    human_id   uuid NOT NULL REFERENCES switchboard.humans ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);
CREATE INDEX console_invites_human ON switchboard.console_invites (human_id);
COMMENT ON TABLE switchboard.console_invites IS
  'One-time console sign-in links by sha256 of their token: opening one registers a passkey.';

-- A human's passkeys (WebAuthn credentials): the public key and what go-webauthn keeps of it.
CREATE TABLE switchboard.console_passkeys (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    human_id      uuid NOT NULL REFERENCES switchboard.humans ON DELETE CASCADE,
    credential_id bytea NOT NULL UNIQUE,
    credential    jsonb NOT NULL,             -- webauthn.Credential as JSON: public key, flags, sign count
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz
);
CREATE INDEX console_passkeys_human ON switchboard.console_passkeys (human_id);
COMMENT ON TABLE switchboard.console_passkeys IS 'WebAuthn credentials (public keys) humans sign in with.';

-- A WebAuthn ceremony in progress (registration through an invite, or a sign-in): the challenge
-- and what go-webauthn needs to check the answer, found by the sha256 of a short-lived cookie.
CREATE TABLE switchboard.console_ceremonies (
    id_hash    bytea PRIMARY KEY CHECK (octet_length(id_hash) = 32),
    kind       text NOT NULL CHECK (kind IN ('register', 'signin')),
    invite     bytea REFERENCES switchboard.console_invites ON DELETE CASCADE,
    data       jsonb NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_ceremonies_expiry ON switchboard.console_ceremonies (expires_at);
COMMENT ON TABLE switchboard.console_ceremonies IS 'WebAuthn ceremonies in progress (challenge and session data), minutes long.';

-- Console sessions: server-side, idle and absolute expiry, ended by sign-out.
CREATE TABLE switchboard.console_sessions (
    id_hash      bytea PRIMARY KEY CHECK (octet_length(id_hash) = 32),
    human_id     uuid NOT NULL REFERENCES switchboard.humans ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    idle_timeout interval NOT NULL,
    expires_at   timestamptz NOT NULL,        -- absolute
    ended_at     timestamptz
);
CREATE INDEX console_sessions_human ON switchboard.console_sessions (human_id);
CREATE INDEX console_sessions_expiry ON switchboard.console_sessions (expires_at);
COMMENT ON TABLE switchboard.console_sessions IS
  'Console sessions by sha256 of their cookie: live while not ended, before expires_at and within idle_timeout of last_seen_at.';

-- What humans did in the console: who, what, on which object, when.
CREATE TABLE switchboard.console_audit (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    human_id uuid REFERENCES switchboard.humans ON DELETE SET NULL,
    action   text NOT NULL,
    object   text NOT NULL DEFAULT '',
    detail   jsonb NOT NULL DEFAULT '{}',
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_audit_human ON switchboard.console_audit (human_id, id);
COMMENT ON TABLE switchboard.console_audit IS 'Every console action: who, what, on which object, when.';
