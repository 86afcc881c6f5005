-- OAuth 2.1: Switchboard is the authorization server of its own endpoints (server/oauth, on
-- ory/fosite). An access token is one more way to hold an endpoint's credential, with exactly
-- the endpoint's scope. Every code, token and client id is stored as its sha256 only; the
-- functions are in db/code/oauth.sql.

-- Clients: registered with Dynamic Client Registration (kind dcr; unused ones expire), or known
-- by the Client ID Metadata Document fetched from their https client_id (kind cimd; a cache
-- entry that expires). Public clients only: PKCE authenticates the exchange.
CREATE TABLE switchboard.oauth_clients (
    client_hash   bytea PRIMARY KEY CHECK (octet_length(client_hash) = 32),
    kind          text NOT NULL CHECK (kind IN ('dcr', 'cimd')),
    client_name   text NOT NULL,
    redirect_uris text[] NOT NULL,
    metadata      jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz            -- NULL: a registration that a grant uses
);
CREATE INDEX oauth_clients_expiry ON switchboard.oauth_clients (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX oauth_clients_dcr_recent ON switchboard.oauth_clients (created_at) WHERE kind = 'dcr';
COMMENT ON TABLE switchboard.oauth_clients IS
  'OAuth clients by sha256 of their client_id: dynamic registrations and cached client metadata documents.';

-- Approval codes the operator mints (switchboard endpoint connect): one use, a deadline, and
-- burnt after 5 wrong tries on the endpoint's consent page.
CREATE TABLE switchboard.oauth_approval_codes (
    code_hash   bytea PRIMARY KEY CHECK (octet_length(code_hash) = 32),
    endpoint_id uuid NOT NULL REFERENCES switchboard.endpoints (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    failures    int NOT NULL DEFAULT 0,
    used_at     timestamptz
);
CREATE INDEX oauth_approval_codes_endpoint ON switchboard.oauth_approval_codes (endpoint_id) WHERE used_at IS NULL;
COMMENT ON TABLE switchboard.oauth_approval_codes IS
  'One-time approval codes for the consent page, by sha256; 5 wrong tries on the endpoint burn its live codes.';

-- A grant: a human approved this client on this endpoint. Its tokens live while it does.
CREATE TABLE switchboard.oauth_grants (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    endpoint_id   uuid NOT NULL REFERENCES switchboard.endpoints (id) ON DELETE CASCADE,
    client_hash   bytea NOT NULL,
    client_name   text NOT NULL,
    redirect_host text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);
CREATE INDEX oauth_grants_endpoint ON switchboard.oauth_grants (endpoint_id);
COMMENT ON TABLE switchboard.oauth_grants IS
  'Consents: a client approved on an endpoint. Revoking it (or the endpoint, or rotating its credential) ends its tokens.';

-- What fosite stores per authorization code, PKCE challenge, access token and refresh token: the
-- request it was issued for (sanitized: no token, code or verifier in it), by the sha256 of the
-- code or token. request_id is the token family (a refresh keeps it).
CREATE TABLE switchboard.oauth_tokens (
    signature   bytea NOT NULL CHECK (octet_length(signature) = 32),
    kind        text NOT NULL CHECK (kind IN ('code', 'pkce', 'access', 'refresh')),
    request_id  text NOT NULL,
    grant_id    uuid NOT NULL REFERENCES switchboard.oauth_grants (id) ON DELETE CASCADE,
    endpoint_id uuid NOT NULL,
    active      boolean NOT NULL DEFAULT true,
    expires_at  timestamptz NOT NULL,
    request     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (signature, kind)
);
CREATE INDEX oauth_tokens_family ON switchboard.oauth_tokens (request_id);
CREATE INDEX oauth_tokens_expiry ON switchboard.oauth_tokens (expires_at);
CREATE INDEX oauth_tokens_grant ON switchboard.oauth_tokens (grant_id);
COMMENT ON TABLE switchboard.oauth_tokens IS
  'Authorization codes, PKCE challenges, access and refresh tokens by sha256, with the sanitized request each was issued for.';
