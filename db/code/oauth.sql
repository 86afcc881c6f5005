-- OAuth 2.1 storage for server/oauth (ory/fosite): clients, approval codes, grants, and the
-- codes and tokens fosite issues. Everything secret arrives as its sha256; a code or token is
-- valid only while its grant is live and its endpoint active, so revoking either (or rotating
-- the endpoint's credential, which revokes its grants) ends every token at once.

-- A client by the sha256 of its client_id: a registration, or a metadata document still cached.
CREATE OR REPLACE FUNCTION switchboard.oauth_client_get(p_client_hash bytea) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT jsonb_build_object('kind', c.kind, 'client_name', c.client_name,
                                      'redirect_uris', to_jsonb(c.redirect_uris), 'metadata', c.metadata)
              FROM switchboard.oauth_clients c
             WHERE c.client_hash = p_client_hash
               AND (c.expires_at IS NULL OR c.expires_at > now()));
END
$$;
COMMENT ON FUNCTION switchboard.oauth_client_get(bytea) IS
  'The registered or cached OAuth client whose client_id hashes to p_client_hash; NULL when unknown or expired.';

-- Register a client (dcr) or cache a fetched metadata document (cimd) for p_ttl. Registrations
-- are limited to p_per_minute across the server (false past it): each costs a row until it
-- expires unused.
CREATE OR REPLACE FUNCTION switchboard.oauth_client_put(
    p_client_hash bytea, p_kind text, p_client_name text, p_redirect_uris text[], p_metadata jsonb,
    p_ttl interval, p_per_minute int)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_kind = 'dcr' THEN
        -- One registration at a time, so the count below cannot be raced past.
        PERFORM pg_advisory_xact_lock(hashtext('switchboard.oauth_client_put'));
        IF (SELECT count(*) FROM switchboard.oauth_clients
             WHERE kind = 'dcr' AND created_at > now() - interval '1 minute') >= p_per_minute THEN
            RETURN false;
        END IF;
    END IF;
    INSERT INTO switchboard.oauth_clients (client_hash, kind, client_name, redirect_uris, metadata, expires_at)
    VALUES (p_client_hash, p_kind, p_client_name, p_redirect_uris, p_metadata, now() + p_ttl)
    ON CONFLICT (client_hash) DO UPDATE
        SET client_name = excluded.client_name, redirect_uris = excluded.redirect_uris,
            metadata = excluded.metadata, created_at = now(), expires_at = excluded.expires_at
      WHERE switchboard.oauth_clients.kind = 'cimd';
    RETURN true;
END
$$;
COMMENT ON FUNCTION switchboard.oauth_client_put(bytea, text, text, text[], jsonb, interval, int) IS
  'Store a dynamic registration (false when p_per_minute were made in the last minute; expires unused after p_ttl) or refresh a cached client metadata document.';

-- What the consent page and the protected resource metadata show of an active endpoint.
CREATE OR REPLACE FUNCTION switchboard.oauth_endpoint(p_slug text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT jsonb_build_object('endpoint_id', e.id, 'slug', e.slug, 'agent', a.name, 'human', h.name, 'human_id', h.id,
                                      'queues', to_jsonb(e.queues), 'verbs', to_jsonb(e.verbs))
              FROM switchboard.endpoints e
              JOIN switchboard.agents a ON a.id = e.agent_id
              JOIN switchboard.humans h ON h.id = a.owner_human_id
             WHERE e.slug = p_slug AND e.state = 'active');
END
$$;
COMMENT ON FUNCTION switchboard.oauth_endpoint(text) IS
  'Agent, human, queues and verbs of an active endpoint by slug, for the consent page; NULL otherwise.';

-- The consent: a right approval code is consumed and a grant recorded for (client, endpoint).
-- A wrong one counts against every live code of the endpoint; the fifth wrong try burns them.
-- Answers {grant_id} or {refused: reason} rather than raising, so the count of a wrong try is
-- kept (a raise would roll it back).
CREATE OR REPLACE FUNCTION switchboard.oauth_approve(
    p_endpoint uuid, p_code_hash bytea, p_client_hash bytea, p_client_name text, p_redirect_host text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_grant uuid;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM switchboard.endpoints WHERE id = p_endpoint AND state = 'active') THEN
        RETURN jsonb_build_object('refused', 'endpoint_inactive');
    END IF;
    UPDATE switchboard.oauth_approval_codes
       SET used_at = now()
     WHERE code_hash = p_code_hash AND endpoint_id = p_endpoint
       AND used_at IS NULL AND expires_at > now() AND failures < 5;
    IF NOT FOUND THEN
        UPDATE switchboard.oauth_approval_codes
           SET failures = failures + 1
         WHERE endpoint_id = p_endpoint AND used_at IS NULL AND expires_at > now() AND failures < 5;
        RETURN jsonb_build_object('refused', 'wrong_code');
    END IF;
    INSERT INTO switchboard.oauth_grants (endpoint_id, client_hash, client_name, redirect_host)
    VALUES (p_endpoint, p_client_hash, p_client_name, p_redirect_host)
    RETURNING id INTO v_grant;
    -- A registration in use no longer expires.
    UPDATE switchboard.oauth_clients SET expires_at = NULL WHERE client_hash = p_client_hash AND kind = 'dcr';
    RETURN jsonb_build_object('grant_id', v_grant);
END
$$;
COMMENT ON FUNCTION switchboard.oauth_approve(uuid, bytea, bytea, text, text) IS
  'Consume an approval code of an active endpoint and record a grant: {grant_id}, or {refused: wrong_code | endpoint_inactive} (5 wrong tries burn the endpoint''s live codes).';

-- Store what fosite issued (a code, PKCE challenge, access or refresh token) under its sha256.
CREATE OR REPLACE FUNCTION switchboard.oauth_token_put(
    p_kind text, p_signature bytea, p_request_id text, p_grant uuid, p_expires_at timestamptz, p_request jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO switchboard.oauth_tokens (signature, kind, request_id, grant_id, endpoint_id, expires_at, request)
    SELECT p_signature, p_kind, p_request_id, g.id, g.endpoint_id, p_expires_at, p_request
      FROM switchboard.oauth_grants g
      JOIN switchboard.endpoints e ON e.id = g.endpoint_id
     WHERE g.id = p_grant AND g.revoked_at IS NULL AND e.state = 'active';
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('forbidden', 'the grant or its endpoint was revoked');
    END IF;
END
$$;
COMMENT ON FUNCTION switchboard.oauth_token_put(text, bytea, text, uuid, timestamptz, jsonb) IS
  'Store an issued code or token by sha256 under its live grant; forbidden when the grant or endpoint was revoked.';

-- A stored request while its grant is live and its endpoint active (expiry is fosite's check,
-- from the request's session). active=false: used or rotated (reuse detection needs the row).
CREATE OR REPLACE FUNCTION switchboard.oauth_token_get(p_kind text, p_signature bytea)
RETURNS TABLE (request jsonb, active boolean)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT t.request, t.active
      FROM switchboard.oauth_tokens t
      JOIN switchboard.oauth_grants g ON g.id = t.grant_id
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.signature = p_signature AND t.kind = p_kind
       AND g.revoked_at IS NULL AND e.state = 'active';
END
$$;
COMMENT ON FUNCTION switchboard.oauth_token_get(text, bytea) IS
  'The request a code or token was issued for, and whether it is still active; no row when unknown or its grant or endpoint is revoked.';

-- Mark one code or token used (codes) or rotated (refresh tokens). Conditional, so of two
-- concurrent exchanges of the same code or refresh token only one wins: false for the other.
CREATE OR REPLACE FUNCTION switchboard.oauth_token_deactivate(p_kind text, p_signature bytea) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE switchboard.oauth_tokens SET active = false
     WHERE signature = p_signature AND kind = p_kind AND active;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION switchboard.oauth_token_deactivate(text, bytea) IS
  'Mark a code used or a refresh token rotated; false when it was not active (a concurrent use won).';

CREATE OR REPLACE FUNCTION switchboard.oauth_token_delete(p_kind text, p_signature bytea) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM switchboard.oauth_tokens WHERE signature = p_signature AND kind = p_kind
$$;
COMMENT ON FUNCTION switchboard.oauth_token_delete(text, bytea) IS 'Forget one code, PKCE challenge or token.';

-- End a whole token family (one authorization and all its refreshes) of one kind: revocation
-- (RFC 7009) and refresh-token reuse.
CREATE OR REPLACE FUNCTION switchboard.oauth_token_revoke_family(p_kind text, p_request_id text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_count    int := 0;
    v_endpoint uuid;
BEGIN
    FOR v_endpoint IN
        UPDATE switchboard.oauth_tokens SET active = false, expires_at = least(expires_at, now())
         WHERE request_id = p_request_id AND kind = p_kind AND active
        RETURNING endpoint_id
    LOOP
        v_count := v_count + 1;
    END LOOP;
    -- A server trusts a live session's or a sessionless request's access token until it
    -- expires; this makes every server check its endpoint's credentials in the database again.
    IF p_kind = 'access' AND v_count > 0 THEN
        PERFORM pg_notify('switchboard_revoked', 'recheck:' || v_endpoint);
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION switchboard.oauth_token_revoke_family(text, text) IS
  'Deactivate every code or token of one kind in a token family (request id); the count.';

-- Operator side (the CLI, as the owner; not granted to the runtime).

-- Mint an approval code for an active endpoint; the CLI shows the code once and sends its hash.
CREATE OR REPLACE FUNCTION switchboard.oauth_approval_mint(p_endpoint uuid, p_code_hash bytea, p_ttl interval)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_expires timestamptz;
BEGIN
    IF p_ttl IS NULL OR p_ttl < interval '1 minute' OR p_ttl > interval '1 day' THEN
        PERFORM switchboard.refuse('invalid_argument', 'ttl must be between 1 minute and 1 day');
    ELSIF p_code_hash IS NULL OR octet_length(p_code_hash) <> 32 THEN
        PERFORM switchboard.refuse('invalid_argument', 'code hash must be 32 bytes (sha256)');
    ELSIF NOT EXISTS (SELECT 1 FROM switchboard.endpoints WHERE id = p_endpoint AND state = 'active') THEN
        PERFORM switchboard.refuse('conflict', 'the endpoint is revoked; vend a new one');
    END IF;
    INSERT INTO switchboard.oauth_approval_codes (code_hash, endpoint_id, expires_at)
    VALUES (p_code_hash, p_endpoint, now() + p_ttl)
    RETURNING expires_at INTO v_expires;
    RETURN jsonb_build_object('endpoint_id', p_endpoint, 'expires_at', switchboard.rfc3339(v_expires));
END
$$;
COMMENT ON FUNCTION switchboard.oauth_approval_mint(uuid, bytea, interval) IS
  'Store a one-time approval code (by sha256) for an active endpoint''s consent page, valid for p_ttl (1 min..1 day).';

CREATE OR REPLACE FUNCTION switchboard.oauth_grant_list(p_endpoint uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((
        SELECT jsonb_agg(jsonb_build_object(
                   'grant_id', g.id, 'endpoint_id', g.endpoint_id, 'client_name', g.client_name,
                   'redirect_host', g.redirect_host, 'created_at', switchboard.rfc3339(g.created_at),
                   'revoked_at', switchboard.rfc3339(g.revoked_at),
                   'live_tokens', (SELECT count(*) FROM switchboard.oauth_tokens t
                                    WHERE t.grant_id = g.id AND t.kind IN ('access', 'refresh')
                                      AND t.active AND t.expires_at > now()))
                 ORDER BY g.created_at, g.id)
          FROM switchboard.oauth_grants g
         WHERE g.endpoint_id = p_endpoint), '[]'::jsonb);
END
$$;
COMMENT ON FUNCTION switchboard.oauth_grant_list(uuid) IS 'The OAuth grants of an endpoint, live and revoked; never a token.';

-- Revoke grants (one, or all of an endpoint) and tell the servers to check their sessions'
-- credentials again (the 'rotated:' notification), so live sessions of its tokens close. The
-- MCP Events webhook subscriptions made with them end (a signed terminated envelope each).
CREATE OR REPLACE FUNCTION switchboard.oauth_grants_revoke(p_grant uuid, p_endpoint uuid) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_endpoint uuid;
    v_grant    uuid;
    v_grants   uuid[] := '{}'::uuid[];
    v_count int := 0;
BEGIN
    FOR v_endpoint, v_grant IN
        UPDATE switchboard.oauth_grants SET revoked_at = now()
         WHERE (id = p_grant OR endpoint_id = p_endpoint) AND revoked_at IS NULL
        RETURNING endpoint_id, id
    LOOP
        v_count := v_count + 1;
        v_grants := v_grants || v_grant;
    END LOOP;
    IF v_count > 0 THEN
        PERFORM switchboard.events_terminate_grants(v_grants, 'OAuth grant revoked');
        PERFORM pg_notify('switchboard_revoked', 'rotated:' || coalesce(p_endpoint, v_endpoint));
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION switchboard.oauth_grants_revoke(uuid, uuid) IS
  'Revoke one grant (p_grant) or every grant of an endpoint (p_endpoint); their tokens stop at once, live sessions are told to re-check, webhook subscriptions made with them end.';

CREATE OR REPLACE FUNCTION switchboard.oauth_grant_revoke(p_grant uuid) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    g switchboard.oauth_grants;
BEGIN
    SELECT * INTO g FROM switchboard.oauth_grants WHERE id = p_grant;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'unknown grant');
    END IF;
    PERFORM switchboard.oauth_grants_revoke(p_grant, NULL);
    RETURN jsonb_build_object('grant_id', g.id, 'endpoint_id', g.endpoint_id, 'state', 'revoked');
END
$$;
COMMENT ON FUNCTION switchboard.oauth_grant_revoke(uuid) IS 'End one OAuth grant and its tokens (switchboard endpoint revoke-grant).';

-- Retention, one bounded batch (called by purge()): expired codes and tokens, used or expired
-- approval codes, unused registrations and cached documents past their time, and revoked grants
-- with nothing left under them.
CREATE OR REPLACE FUNCTION switchboard.oauth_purge(p_batch int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_count bigint;
    v_total bigint := 0;
BEGIN
    WITH doomed AS (
        SELECT t.signature, t.kind FROM switchboard.oauth_tokens t
          LEFT JOIN switchboard.oauth_grants g ON g.id = t.grant_id
         WHERE t.expires_at < now() OR g.revoked_at IS NOT NULL
         LIMIT p_batch FOR UPDATE OF t SKIP LOCKED
    )
    DELETE FROM switchboard.oauth_tokens t USING doomed d WHERE t.signature = d.signature AND t.kind = d.kind;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_total := v_total + v_count;

    WITH doomed AS (
        SELECT code_hash FROM switchboard.oauth_approval_codes
         WHERE expires_at < now() OR used_at IS NOT NULL OR failures >= 5
         LIMIT p_batch FOR UPDATE SKIP LOCKED
    )
    DELETE FROM switchboard.oauth_approval_codes c USING doomed d WHERE c.code_hash = d.code_hash;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_total := v_total + v_count;

    WITH doomed AS (
        SELECT client_hash FROM switchboard.oauth_clients
         WHERE expires_at < now()
         LIMIT p_batch FOR UPDATE SKIP LOCKED
    )
    DELETE FROM switchboard.oauth_clients c USING doomed d WHERE c.client_hash = d.client_hash;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_total := v_total + v_count;

    WITH doomed AS (
        SELECT g.id FROM switchboard.oauth_grants g
         WHERE g.revoked_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM switchboard.oauth_tokens t WHERE t.grant_id = g.id)
         LIMIT p_batch FOR UPDATE SKIP LOCKED
    )
    DELETE FROM switchboard.oauth_grants g USING doomed d WHERE g.id = d.id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_total + v_count;
END
$$;
COMMENT ON FUNCTION switchboard.oauth_purge(int) IS
  'One bounded batch of OAuth retention: expired or revoked tokens, spent approval codes, expired registrations and cached documents, empty revoked grants. Rows deleted.';
