-- Identity: humans, agents, endpoints and friend edges; what the operator CLI drives.
--
-- caller() is the scope check every agent-facing function starts with (the queue's hot path
-- uses its inlinable twin, scope(), in queue.sql). Revocation notifies the MCP servers through
-- a trigger, whichever statement revokes.

-- The calling endpoint: its grant and identity. Refuses endpoints that are gone or revoked.
CREATE OR REPLACE FUNCTION switchboard.caller(
    p_endpoint uuid,
    OUT queues text[], OUT owner text, OUT lease_ttl_seconds int, OUT human_id uuid)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT e.queues, 'agent:' || e.agent_id, e.lease_ttl_seconds, a.owner_human_id
      INTO queues, owner, lease_ttl_seconds, human_id
      FROM switchboard.endpoints e
      JOIN switchboard.agents a ON a.id = e.agent_id
     WHERE e.id = p_endpoint AND e.state = 'active';
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('forbidden', 'endpoint is not active');
    END IF;
END
$$;
COMMENT ON FUNCTION switchboard.caller(uuid) IS
  'Scope of an active endpoint: granted queues, agent owner string, default lease, human. forbidden when revoked or unknown.';

CREATE OR REPLACE FUNCTION switchboard.human_add(p_name text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    h switchboard.humans;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[^[:space:][:cntrl:]][^[:cntrl:]]{0,127}$' THEN
        PERFORM switchboard.refuse('invalid_argument', 'human name must be 1-128 printable characters');
    END IF;
    INSERT INTO switchboard.humans (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING RETURNING * INTO h;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('conflict', 'a human with that name exists');
    END IF;
    RETURN jsonb_build_object('id', h.id, 'name', h.name);
END
$$;
COMMENT ON FUNCTION switchboard.human_add(text) IS 'Add a human (principal). conflict when the name is taken.';

CREATE OR REPLACE FUNCTION switchboard.human_id(p_name text) RETURNS uuid
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_id uuid;
BEGIN
    SELECT id INTO v_id FROM switchboard.humans WHERE name = p_name;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'unknown human');
    END IF;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION switchboard.human_id(text) IS 'Id of a human by name; not_found when unknown.';

-- An endpoint by id (uuid text) or slug; not_found otherwise.
CREATE OR REPLACE FUNCTION switchboard.endpoint_id(p_ref text) RETURNS uuid
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_id uuid;
BEGIN
    SELECT id INTO v_id FROM switchboard.endpoints
     WHERE slug = p_ref OR id = switchboard.as_uuid(p_ref);
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'unknown endpoint');
    END IF;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION switchboard.endpoint_id(text) IS 'Resolve an endpoint id or slug; not_found when unknown.';

CREATE OR REPLACE FUNCTION switchboard.endpoint_json(e switchboard.endpoints) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'endpoint_id', e.id,
        'slug', e.slug,
        'agent_id', e.agent_id,
        'agent', a.name,
        'human_id', a.owner_human_id,
        'human', h.name,
        'state', e.state,
        'credential_prefix', e.credential_prefix,
        'queues', to_jsonb(e.queues),
        'verbs', to_jsonb(e.verbs),
        'ceiling', jsonb_build_object('max', e.webhook_max,
                                      'allowed_source_types', to_jsonb(e.webhook_sources),
                                      'allowed_queues', to_jsonb(e.webhook_queues)),
        'lease_ttl_seconds', e.lease_ttl_seconds,
        'created_at', switchboard.rfc3339(e.created_at),
        'rotated_at', switchboard.rfc3339(e.rotated_at),
        'old_credential_until', switchboard.rfc3339(e.old_credential_until),
        'revoked_at', switchboard.rfc3339(e.revoked_at))
      FROM switchboard.agents a
      JOIN switchboard.humans h ON h.id = a.owner_human_id
     WHERE a.id = e.agent_id
$$;
COMMENT ON FUNCTION switchboard.endpoint_json(switchboard.endpoints) IS 'Operator view of an endpoint; never the credential.';

-- Vend an endpoint. The credential is minted by the caller; only its sha256 and a display prefix
-- arrive here. The agent is created under the human when it does not exist yet.
CREATE OR REPLACE FUNCTION switchboard.endpoint_vend(
    p_human             text,
    p_agent             text,
    p_credential_hash   bytea,
    p_credential_prefix text,
    p_queues            text[],
    p_verbs             text[] DEFAULT NULL,     -- NULL: every verb
    p_webhook_max       int DEFAULT 0,
    p_webhook_sources   text[] DEFAULT '{}',
    p_webhook_queues    text[] DEFAULT '{}',
    p_lease_ttl_seconds int DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_human uuid := switchboard.human_id(p_human);
    v_agent uuid;
    v_verbs text[];
    v_bad text;
    e switchboard.endpoints;
BEGIN
    IF p_agent IS NULL OR p_agent !~ '^[^[:space:][:cntrl:]][^[:cntrl:]]{0,127}$' THEN
        PERFORM switchboard.refuse('invalid_argument', 'agent name must be 1-128 printable characters');
    END IF;
    IF coalesce(cardinality(p_queues), 0) = 0
       OR EXISTS (SELECT 1 FROM unnest(p_queues) q WHERE q IS NULL OR q !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$')
       OR EXISTS (SELECT 1 FROM unnest(p_webhook_queues) q WHERE q IS NULL OR q !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$') THEN
        PERFORM switchboard.refuse('invalid_argument', 'queue names must match [A-Za-z0-9][A-Za-z0-9._:-]*');
    END IF;
    SELECT v INTO v_bad FROM unnest(p_verbs) v WHERE NOT EXISTS (SELECT 1 FROM switchboard.verbs WHERE name = v) LIMIT 1;
    IF FOUND THEN
        PERFORM switchboard.refuse('invalid_argument', format('unknown verb %L', v_bad));
    END IF;
    SELECT s INTO v_bad FROM unnest(p_webhook_sources) s WHERE switchboard.trust_mode(s) IS NULL LIMIT 1;
    IF FOUND THEN
        PERFORM switchboard.refuse('invalid_argument', format('unknown webhook source type %L', v_bad));
    END IF;
    IF p_webhook_max IS NULL OR p_webhook_max < 0 THEN
        PERFORM switchboard.refuse('invalid_argument', 'webhook max must be 0 or more');
    END IF;
    IF p_lease_ttl_seconds IS NOT NULL AND p_lease_ttl_seconds NOT BETWEEN 1 AND 86400 THEN
        PERFORM switchboard.refuse('invalid_argument', 'lease ttl must be 1..86400 seconds');
    END IF;

    -- list_todos implies get_todo; the stored allowlist is the effective one, in vocabulary order.
    SELECT array_agg(v.name ORDER BY v.family, v.name) INTO v_verbs
      FROM switchboard.verbs v
     WHERE p_verbs IS NULL OR v.name = ANY (p_verbs)
        OR (v.name = 'get_todo' AND 'list_todos' = ANY (p_verbs));

    INSERT INTO switchboard.agents (owner_human_id, name) VALUES (v_human, p_agent)
    ON CONFLICT (owner_human_id, name) DO NOTHING;
    SELECT id INTO v_agent FROM switchboard.agents WHERE owner_human_id = v_human AND name = p_agent;

    INSERT INTO switchboard.endpoints (agent_id, slug, credential_hash, credential_prefix, queues, verbs,
                                       webhook_max, webhook_sources, webhook_queues, lease_ttl_seconds)
    VALUES (v_agent,
            trim(BOTH '-' FROM regexp_replace(lower(p_agent), '[^a-z0-9]+', '-', 'g')) || '-'
                || substr(md5(gen_random_uuid()::text), 1, 8),
            p_credential_hash, p_credential_prefix,
            (SELECT array_agg(DISTINCT q ORDER BY q) FROM unnest(p_queues) q),
            coalesce(v_verbs, '{}'),
            p_webhook_max,
            coalesce((SELECT array_agg(DISTINCT s ORDER BY s) FROM unnest(p_webhook_sources) s), '{}'),
            coalesce((SELECT array_agg(DISTINCT q ORDER BY q) FROM unnest(p_webhook_queues) q), '{}'),
            p_lease_ttl_seconds)
    RETURNING * INTO e;
    RETURN switchboard.endpoint_json(e);
END
$$;
COMMENT ON FUNCTION switchboard.endpoint_vend(text, text, bytea, text, text[], text[], int, text[], text[], int) IS
  'Vend an endpoint for an agent of a human (agent created when new). Validates queues, verbs, ceiling. Stores only the credential hash.';

-- Authentication: one call per request. Active endpoints only; a rotated-out credential only
-- while its grace lasts.
-- PL/pgSQL rather than SQL: the server calls it as switchboard_runtime, so it runs SECURITY
-- DEFINER (grants.sql); a SQL function with that is never inlined and is planned again on every
-- call, a PL/pgSQL one keeps its plan (measured: about 10x the cost per call).
-- An OAuth access token (server/oauth) resolves the same way: stored as its sha256, bound to one
-- endpoint, live while unexpired and its grant unrevoked; oauth tells the caller which it was,
-- and expires_at until when (a session trusts it no longer: server/mcpapi).
CREATE OR REPLACE FUNCTION switchboard.credential_resolve(p_credential_hash bytea)
RETURNS TABLE (endpoint_id uuid, slug text, agent_id uuid, human_id uuid, queues text[], verbs text[],
               oauth boolean, expires_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT e.id, e.slug, e.agent_id, a.owner_human_id, e.queues, e.verbs, m.oauth, m.expires_at
      FROM (SELECT c.id, false AS oauth, NULL::timestamptz AS expires_at
              FROM switchboard.endpoints c WHERE c.credential_hash = p_credential_hash
            UNION ALL
            SELECT o.id, false, NULL FROM switchboard.endpoints o
             WHERE o.old_credential_hash = p_credential_hash AND o.old_credential_until > now()
            UNION ALL
            SELECT t.endpoint_id, true, t.expires_at FROM switchboard.oauth_tokens t
              JOIN switchboard.oauth_grants g ON g.id = t.grant_id
             WHERE t.signature = p_credential_hash AND t.kind = 'access' AND t.active
               AND t.expires_at > now() AND g.revoked_at IS NULL
            LIMIT 1) m
      JOIN switchboard.endpoints e ON e.id = m.id
      JOIN switchboard.agents a ON a.id = e.agent_id
     WHERE e.state = 'active';
END
$$;
COMMENT ON FUNCTION switchboard.credential_resolve(bytea) IS
  'The active endpoint (and its immutable scope) whose credential, previous credential within its rotation grace, or live OAuth access token hashes to p_credential_hash (oauth and expires_at: a token, and its end); no row otherwise.';

-- The previous release's lookup (expand, then contract: drop it one release after nothing calls
-- it). It knows no OAuth token, so a replica of that release refuses one with 401 until it is
-- replaced.
CREATE OR REPLACE FUNCTION switchboard.endpoint_resolve(p_credential_hash bytea)
RETURNS TABLE (endpoint_id uuid, slug text, agent_id uuid, human_id uuid, queues text[], verbs text[])
LANGUAGE sql STABLE AS $$
    SELECT r.endpoint_id, r.slug, r.agent_id, r.human_id, r.queues, r.verbs
      FROM switchboard.credential_resolve(p_credential_hash) r
     WHERE NOT r.oauth;
$$;
COMMENT ON FUNCTION switchboard.endpoint_resolve(bytea) IS
  'Superseded by credential_resolve (kept for the previous release): the endpoint an sbk_ credential opens.';

CREATE OR REPLACE FUNCTION switchboard.endpoint_list(p_human text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_human uuid;
BEGIN
    IF p_human IS NOT NULL THEN
        v_human := switchboard.human_id(p_human);
    END IF;
    RETURN coalesce((SELECT jsonb_agg(switchboard.endpoint_json(e) ORDER BY e.created_at, e.id)
                       FROM switchboard.endpoints e
                       JOIN switchboard.agents a ON a.id = e.agent_id
                      WHERE v_human IS NULL OR a.owner_human_id = v_human), '[]'::jsonb);
END
$$;
COMMENT ON FUNCTION switchboard.endpoint_list(text) IS 'All endpoints, or those of one human; never a credential.';

CREATE OR REPLACE FUNCTION switchboard.endpoint_revoke(p_endpoint uuid) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_count int;
BEGIN
    UPDATE switchboard.endpoints SET state = 'revoked', revoked_at = coalesce(revoked_at, now())
     WHERE id = p_endpoint;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'unknown endpoint');
    END IF;
    PERFORM switchboard.events_terminate(p_endpoint, 'Access revoked'); -- first: all with this reason
    PERFORM switchboard.oauth_grants_revoke(NULL, p_endpoint);
    UPDATE switchboard.todos
       SET state = 'failed', next_retry_at = NULL, lease_expires_at = NULL, lease_token_hash = NULL,
           result = '{"error": "endpoint_revoked"}', completed_at = now(), updated_at = now()
     WHERE endpoint_id = p_endpoint
       AND (state IN ('pending', 'claimed') OR next_retry_at IS NOT NULL);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN jsonb_build_object('endpoint_id', p_endpoint, 'state', 'revoked', 'todos_dead_lettered', v_count);
END
$$;
COMMENT ON FUNCTION switchboard.endpoint_revoke(uuid) IS
  'Revoke an endpoint: credential and OAuth grants dead at once, open todos dead-lettered (result endpoint_revoked), live sessions told to close.';

-- Credential rotation.
-- Live sessions of a credential that no longer resolves are closed by the servers on the
-- switchboard_revoked channel: payload 'rotated:<endpoint id>' (the endpoint stays active; each
-- server re-checks its sessions' credentials), plain '<endpoint id>' for a revocation.
CREATE OR REPLACE FUNCTION switchboard.endpoint_rotate(
    p_endpoint uuid, p_credential_hash bytea, p_credential_prefix text, p_grace interval DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    e switchboard.endpoints;
    v_grace boolean := coalesce(p_grace > interval '0', false);
BEGIN
    IF p_grace < interval '0' OR p_grace > interval '7 days' THEN
        PERFORM switchboard.refuse('invalid_argument', 'grace must be between 0 and 7 days');
    ELSIF p_credential_hash IS NULL OR octet_length(p_credential_hash) <> 32 THEN
        PERFORM switchboard.refuse('invalid_argument', 'credential hash must be 32 bytes (sha256)');
    END IF;
    UPDATE switchboard.endpoints u
       SET old_credential_hash  = CASE WHEN v_grace THEN u.credential_hash END,
           old_credential_until = CASE WHEN v_grace THEN now() + p_grace END,
           credential_hash      = p_credential_hash,
           credential_prefix    = p_credential_prefix,
           rotated_at           = now()
     WHERE u.id = p_endpoint AND u.state = 'active'
    RETURNING * INTO e;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM switchboard.endpoints WHERE id = p_endpoint) THEN
            PERFORM switchboard.refuse('conflict', 'the endpoint is revoked; vend a new one');
        END IF;
        PERFORM switchboard.refuse('not_found', 'unknown endpoint');
    END IF;
    -- A new credential ends the OAuth grants too (oauth_grants_revoke notifies when it ends any),
    -- and the webhook subscriptions (first, so that all say why).
    PERFORM switchboard.events_terminate(e.id, 'Credential rotated');
    PERFORM switchboard.oauth_grants_revoke(NULL, e.id);
    IF NOT v_grace THEN
        PERFORM pg_notify('switchboard_revoked', 'rotated:' || e.id);
    END IF;
    RETURN switchboard.endpoint_json(e);
END
$$;
COMMENT ON FUNCTION switchboard.endpoint_rotate(uuid, bytea, text, interval) IS
  'Replace an active endpoint''s credential (id, slug, scope, todos and webhooks stay). Without grace the old credential stops at once and its live sessions close; with grace it works until now() + grace (expire_credentials ends it).';

CREATE OR REPLACE FUNCTION switchboard.expire_credentials() RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    v_count int := 0;
BEGIN
    FOR v_id IN
        UPDATE switchboard.endpoints
           SET old_credential_hash = NULL, old_credential_until = NULL
         WHERE old_credential_until <= now()
        RETURNING id
    LOOP
        PERFORM pg_notify('switchboard_revoked', 'rotated:' || v_id);
        v_count := v_count + 1;
    END LOOP;
    -- A provider secret's rotation TTL that ran out: the old secret no longer verifies
    -- (webhook_for_ingest hides it at once); erase it.
    UPDATE switchboard.webhooks SET previous_secret = NULL, previous_secret_until = NULL
     WHERE previous_secret_until <= now();
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION switchboard.expire_credentials() IS
  'End the rotation grace that ran out: forget the previous credentials and tell the servers to close their sessions; erase webhook secrets whose --previous-ttl ran out. Run by the server''s maintenance loop and by purge_all().';

-- The public base URL the running server serves, for the CLI.
CREATE OR REPLACE FUNCTION switchboard.record_base_url(p_base_url text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO switchboard.public_url (base_url, recorded_at) VALUES (rtrim(p_base_url, '/'), now())
    ON CONFLICT (one) DO UPDATE SET base_url = excluded.base_url, recorded_at = excluded.recorded_at
$$;
COMMENT ON FUNCTION switchboard.record_base_url(text) IS
  'Called by switchboard serve at start: the base URL it serves, for the CLI''s mcp_url.';

-- MCP servers trust a session's credential until they hear that its endpoint was revoked
-- (server/mcpapi, trustedSession). They must hear of every revocation, however it is made:
-- endpoint_revoke() or a DBA's UPDATE. The trigger below sends the notification, so no path can
-- forget it (endpoint_revoke() sends none of its own).
CREATE OR REPLACE FUNCTION switchboard.notify_revoked() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('switchboard_revoked', NEW.id::text);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION switchboard.notify_revoked() IS
  'Trigger: NOTIFY switchboard_revoked with the endpoint id when an endpoint leaves the active state.';

CREATE OR REPLACE TRIGGER endpoints_revoked
    AFTER UPDATE OF state ON switchboard.endpoints
    FOR EACH ROW WHEN (OLD.state = 'active' AND NEW.state <> 'active')
    EXECUTE FUNCTION switchboard.notify_revoked();

CREATE OR REPLACE FUNCTION switchboard.friend_json(f switchboard.friend_edges) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', f.id,
        'from_human', (SELECT name FROM switchboard.humans WHERE id = f.from_human),
        'to_human', (SELECT name FROM switchboard.humans WHERE id = f.to_human),
        'state', f.state,
        'created_at', switchboard.rfc3339(f.created_at),
        'decided_at', switchboard.rfc3339(f.decided_at))
$$;
COMMENT ON FUNCTION switchboard.friend_json(switchboard.friend_edges) IS 'Operator view of a friend edge.';

CREATE OR REPLACE FUNCTION switchboard.friend_request(p_from text, p_to text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    f switchboard.friend_edges;
BEGIN
    IF p_from = p_to THEN
        PERFORM switchboard.refuse('invalid_argument', 'a human cannot befriend themself');
    END IF;
    INSERT INTO switchboard.friend_edges (from_human, to_human)
    VALUES (switchboard.human_id(p_from), switchboard.human_id(p_to))
    ON CONFLICT (from_human, to_human) WHERE state IN ('pending', 'approved') DO NOTHING
    RETURNING * INTO f;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('conflict', 'a pending or approved edge already runs in that direction');
    END IF;
    RETURN switchboard.friend_json(f);
END
$$;
COMMENT ON FUNCTION switchboard.friend_request(text, text) IS
  'Request a friend edge from one human to another (pending). One live edge per ordered pair.';

-- pending -> approved | denied; approved -> revoked. Anything else is a conflict.
CREATE OR REPLACE FUNCTION switchboard.friend_decide(p_edge uuid, p_state text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    f switchboard.friend_edges;
BEGIN
    IF p_state NOT IN ('approved', 'denied', 'revoked') THEN
        PERFORM switchboard.refuse('invalid_argument', 'state must be approved, denied or revoked');
    END IF;
    UPDATE switchboard.friend_edges
       SET state = p_state, decided_at = now()
     WHERE id = p_edge
       AND state = CASE WHEN p_state = 'revoked' THEN 'approved' ELSE 'pending' END
    RETURNING * INTO f;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM switchboard.friend_edges WHERE id = p_edge) THEN
            PERFORM switchboard.refuse('conflict', 'the edge is not in a state that allows this');
        END IF;
        PERFORM switchboard.refuse('not_found', 'unknown friend edge');
    END IF;
    RETURN jsonb_build_object('id', f.id, 'state', f.state);
END
$$;
COMMENT ON FUNCTION switchboard.friend_decide(uuid, text) IS
  'Move a friend edge: pending -> approved|denied, approved -> revoked.';

CREATE OR REPLACE FUNCTION switchboard.friend_list(p_human text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_human uuid;
BEGIN
    IF p_human IS NOT NULL THEN
        v_human := switchboard.human_id(p_human);
    END IF;
    RETURN coalesce((SELECT jsonb_agg(switchboard.friend_json(f) ORDER BY f.created_at, f.id)
                       FROM switchboard.friend_edges f
                      WHERE v_human IS NULL OR v_human IN (f.from_human, f.to_human)), '[]'::jsonb);
END
$$;
COMMENT ON FUNCTION switchboard.friend_list(text) IS 'Friend edges, all or those touching one human.';
