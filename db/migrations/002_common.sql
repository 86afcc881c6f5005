-- Shared helpers: settings, refusals, JSON shapes, the doorbell signal.

-- PL/pgSQL rather than SQL: a non-inlinable SQL function is planned again on every call,
-- a PL/pgSQL one keeps its plan.
CREATE FUNCTION switchboard.setting(p_key text) RETURNS numeric
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT value FROM switchboard.settings WHERE key = p_key);
END
$$;
COMMENT ON FUNCTION switchboard.setting(text) IS 'Current value of a tunable from switchboard.settings.';

-- Raise a domain refusal with the SQLSTATE of its wire code (see switchboard.error_codes).
CREATE FUNCTION switchboard.refuse(p_code text, p_message text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    SELECT sqlstate INTO v_state FROM switchboard.error_codes WHERE code = p_code;
    RAISE EXCEPTION USING ERRCODE = coalesce(v_state, 'XX000'), MESSAGE = p_message;
END
$$;
COMMENT ON FUNCTION switchboard.refuse(text, text) IS
  'Raises the SQLSTATE of a wire error code (switchboard.error_codes) with a fixed, secret-free message.';

-- STABLE, as to_char is: an IMMUTABLE wrapper around a STABLE call would never be inlined.
-- Ids arrive as text from agents; a malformed one must behave like an unknown one, not raise.
CREATE FUNCTION switchboard.as_uuid(p_text text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_text ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN p_text::uuid END
$$;
COMMENT ON FUNCTION switchboard.as_uuid(text) IS 'The uuid in p_text, or NULL when it is not one (malformed ids match nothing).';

CREATE FUNCTION switchboard.rfc3339(p_ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(p_ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;
COMMENT ON FUNCTION switchboard.rfc3339(timestamptz) IS 'RFC 3339 UTC text of a timestamp, whatever the session TimeZone.';

-- A one-time secret from the server's strong random source (gen_random_uuid uses pg_strong_random).
CREATE FUNCTION switchboard.new_token(p_prefix text) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT p_prefix || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '')
$$;
COMMENT ON FUNCTION switchboard.new_token(text) IS 'Prefix plus 244 random bits in hex; used for lease fence tokens.';

-- Trust is switchboard's decision, from the source type alone; no input can change it.
CREATE FUNCTION switchboard.trust_mode(p_source_type text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_source_type IN ('github', 'gitea', 'stripe', 'slack', 'cairn') THEN 'signed'
                WHEN p_source_type = 'generic' THEN 'token' END
$$;
COMMENT ON FUNCTION switchboard.trust_mode(text) IS
  'signed for github gitea stripe slack cairn (HMAC-verified), token for generic; NULL for unknown types.';

-- The todo row as agents see it; p_detail adds payload and routing (claim, get).
CREATE FUNCTION switchboard.todo_json(t switchboard.todos, p_detail boolean DEFAULT false) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', t.id,
        'queue', t.queue,
        'state', t.state,
        'attempt', t.attempt,
        'max_attempts', t.max_attempts,
        'title', t.title,
        'source', t.source,
        'kind', t.kind,
        'owner', t.owner,
        'lease_expires_at', switchboard.rfc3339(t.lease_expires_at),
        'next_retry_at', switchboard.rfc3339(t.next_retry_at),
        'dead_letter', t.state = 'failed' AND t.next_retry_at IS NULL,
        'created_at', switchboard.rfc3339(t.created_at),
        'payload_size', t.payload_size)
    || CASE WHEN p_detail
            THEN jsonb_build_object('payload', t.payload, 'routing', t.routing)
            ELSE '{}'::jsonb END
$$;
COMMENT ON FUNCTION switchboard.todo_json(switchboard.todos, boolean) IS
  'The todo shape of the MCP surface (times RFC 3339 UTC); detail adds payload and routing.';

-- The calling endpoint: its grant and identity. Refuses endpoints that are gone or revoked.
CREATE FUNCTION switchboard.caller(
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

-- Lease length for a call: the call's ask, else the endpoint's, else the setting; clamped to 1..lease_max_seconds.
CREATE FUNCTION switchboard.lease_interval(p_ask int, p_endpoint_default int) RETURNS interval
LANGUAGE sql STABLE AS $$
    SELECT make_interval(secs => greatest(1, least(
               coalesce(p_ask, p_endpoint_default, switchboard.setting('lease_default_seconds')),
               switchboard.setting('lease_max_seconds'))))
$$;
COMMENT ON FUNCTION switchboard.lease_interval(int, int) IS
  'Lease TTL: call value, else endpoint default, else lease_default_seconds; clamped to 1..lease_max_seconds.';

-- Retry delay after the given (1-based) attempt failed: min(base * 2^(attempt-1), cap).
CREATE FUNCTION switchboard.backoff(p_attempt int) RETURNS interval
LANGUAGE sql STABLE AS $$
    SELECT make_interval(secs => least(
               switchboard.setting('backoff_base_seconds') * power(2::numeric, greatest(p_attempt, 1) - 1),
               switchboard.setting('backoff_cap_seconds')))
$$;
COMMENT ON FUNCTION switchboard.backoff(int) IS
  'Retry delay after attempt N failed: min(backoff_base_seconds * 2^(N-1), backoff_cap_seconds).';

-- Doorbell signal, coalesced. NOTIFY takes a database-wide lock at commit that serializes
-- committing transactions, so a busy database must not notify in every transaction: only the
-- first transaction per window (doorbell_window_ms) that gets the doorbell row without waiting
-- sends one, with payload '*' ("work became ready"). Others skip. Listeners then re-read the
-- ready todos of every endpoint they serve, at once and once more after the window (trailing
-- re-check), which picks up the todos whose signal was coalesced. Coalescing per database, not
-- per endpoint, bounds the NOTIFY rate however many endpoints are busy.
-- Best effort: no todo depends on a signal to be claimable.
CREATE FUNCTION switchboard.ring() RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF switchboard.setting('doorbell_enabled') = 0 THEN
        RETURN false;
    END IF;
    UPDATE switchboard.doorbell d
       SET signalled_at = clock_timestamp()
     WHERE d.one = (SELECT b.one
                      FROM switchboard.doorbell b
                     WHERE b.signalled_at < clock_timestamp()
                                            - make_interval(secs => switchboard.setting('doorbell_window_ms') / 1000.0)
                       FOR UPDATE SKIP LOCKED);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('switchboard_doorbell', '*');
    RETURN true;
END
$$;
COMMENT ON FUNCTION switchboard.ring() IS
  'Signal the doorbell channel switchboard_doorbell (payload *), at most once per doorbell_window_ms per database (coalesced). Returns whether it notified.';
