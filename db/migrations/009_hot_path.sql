-- The hot path: the holder verbs in one statement each, a lease index the planner cannot misuse,
-- a one-call drain step, and a revocation notice for every revocation.
--
-- Found by profiling the claim_next+complete drain (README, "Where the time goes"):
--
-- 1. todos_leases was partial on state = 'claimed'. holds() says state = 'claimed' too, so a
--    generic plan of complete, fail, heartbeat or release could pick that index over the
--    primary key and walk every lease entry, dead ones included, to find one id: the cost of a
--    completion grew with the number of claims since the last vacuum. The index is now partial
--    on its own key (lease_expires_at IS NOT NULL), which a deadline comparison implies and an
--    id lookup does not; a CHECK keeps "claimed" and "has a lease" the same set.
-- 2. Each verb looked up its caller with a nested PL/pgSQL call (caller()) and its lease length
--    with two more (lease_interval() -> setting() twice). switchboard.scope() is a SQL row
--    source the planner inlines into the verb's own UPDATE, so the happy path of a holder verb
--    is one statement; the reason for a refusal is looked up only when nothing matched.
-- 3. Every revocation notifies, whatever made it (trigger endpoints_revoked, below): MCP servers
--    trust a session's vouched-for credential until they hear of one.
-- 4. finish_and_claim_next: complete/fail/release with `next` as one call (below).

ALTER TABLE switchboard.todos
    ADD CONSTRAINT todos_lease_iff_claimed CHECK ((state = 'claimed') = (lease_expires_at IS NOT NULL));

DROP INDEX switchboard.todos_leases;
-- Takeover and reaper paths: in-flight leases only, keyed by deadline.
CREATE INDEX todos_leases ON switchboard.todos (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- What an active endpoint may do, as a row source: its granted queues, the owner string of its
-- agent, and the lease a claim or heartbeat gets (the call's ask, else the endpoint's default,
-- else lease_default_seconds; clamped to 1..lease_max_seconds). No row when the endpoint is
-- unknown or revoked. A set-returning SQL function so the planner inlines it into the caller's
-- statement (a scalar SQL function with a subquery would not be inlined).
CREATE FUNCTION switchboard.scope(p_endpoint uuid, p_lease_ask int DEFAULT NULL)
RETURNS TABLE (queues text[], owner text, lease interval)
LANGUAGE sql STABLE AS $$
    SELECT e.queues,
           'agent:' || e.agent_id,
           make_interval(secs => greatest(1, least(
               coalesce(p_lease_ask, e.lease_ttl_seconds,
                        (SELECT s.value FROM switchboard.settings s WHERE s.key = 'lease_default_seconds')),
               (SELECT s.value FROM switchboard.settings s WHERE s.key = 'lease_max_seconds'))))
      FROM switchboard.endpoints e
     WHERE e.id = p_endpoint AND e.state = 'active'
$$;
COMMENT ON FUNCTION switchboard.scope(uuid, int) IS
  'Row source (inlined by the planner): granted queues, agent owner and lease interval of an active endpoint; no row when revoked or unknown.';

-- Why a todo verb found nothing to change: forbidden (endpoint not active), not_found (unknown
-- or another endpoint's todo), forbidden (queue outside the grant), else conflict. Read-only.
DROP FUNCTION switchboard.refuse_todo(uuid, uuid, text[]);
CREATE FUNCTION switchboard.refuse_todo(p_endpoint uuid, p_todo uuid) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_queues text[] := (switchboard.caller(p_endpoint)).queues;
    v_queue  text;
BEGIN
    SELECT queue INTO v_queue FROM switchboard.todos WHERE id = p_todo AND endpoint_id = p_endpoint;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'todo not found');
    ELSIF NOT v_queue = ANY (v_queues) THEN
        PERFORM switchboard.refuse('forbidden', 'todo queue is outside the granted queues');
    END IF;
    PERFORM switchboard.refuse('conflict', 'todo is not in a state that allows this, or is held by another worker');
END
$$;
COMMENT ON FUNCTION switchboard.refuse_todo(uuid, uuid) IS
  'Raises the refusal for a todo verb that matched no row: forbidden (endpoint not active), not_found (unknown or foreign), forbidden (queue outside grant), else conflict.';

CREATE OR REPLACE FUNCTION switchboard.get_todo(p_endpoint uuid, p_todo uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_todo jsonb;
BEGIN
    SELECT switchboard.todo_json(t, true) || jsonb_build_object('result', t.result)
      INTO v_todo
      FROM switchboard.todos t, switchboard.scope(p_endpoint) g
     WHERE t.id = p_todo AND t.endpoint_id = p_endpoint AND t.queue = ANY (g.queues);
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo);
    END IF;
    RETURN v_todo;
END
$$;

CREATE OR REPLACE FUNCTION switchboard.claim(
    p_endpoint uuid, p_todo uuid, p_lease_ttl_seconds int DEFAULT NULL, p_require_fence boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_token text;
    v_todo  jsonb;
BEGIN
    IF p_require_fence THEN
        v_token := switchboard.new_token('sbl_');
    END IF;
    UPDATE switchboard.todos u
       SET state            = 'claimed',
           owner            = g.owner,
           lease_expires_at = now() + g.lease,
           lease_token_hash = sha256(convert_to(v_token, 'UTF8')),
           attempt          = u.attempt + 1,
           next_retry_at    = NULL,
           updated_at       = now()
      FROM switchboard.scope(p_endpoint, p_lease_ttl_seconds) g
     WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
       AND u.queue = ANY (g.queues)
       AND u.attempt < u.max_attempts
       AND (u.state = 'pending'
            OR (u.state = 'claimed' AND u.lease_expires_at < now())
            OR (u.state = 'failed' AND u.next_retry_at <= now()))
    RETURNING switchboard.todo_json(u, true) INTO v_todo;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo);
    END IF;
    RETURN jsonb_strip_nulls(jsonb_build_object('lease_token', v_token)) || v_todo;
END
$$;

CREATE OR REPLACE FUNCTION switchboard.claim_next(
    p_endpoint uuid, p_queue text DEFAULT NULL, p_lease_ttl_seconds int DEFAULT NULL,
    p_require_fence boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_queues  text[];
    v_owner   text;
    v_lease   interval;
    v_expired boolean;
    v_due     boolean;
    v_token   text;
    v_todo    jsonb;
BEGIN
    -- The grant, and whether this endpoint has expired leases or due retries to take over first
    -- (so that no work waits for the reaper, and they compete with pending work in created_at
    -- order). The takeovers write, so they run only when these cheap index probes find work.
    SELECT g.queues, g.owner, g.lease,
           EXISTS (SELECT 1 FROM switchboard.todos
                    WHERE state = 'claimed' AND lease_expires_at < now() AND endpoint_id = p_endpoint),
           EXISTS (SELECT 1 FROM switchboard.todos WHERE next_retry_at <= now() AND endpoint_id = p_endpoint)
      INTO v_queues, v_owner, v_lease, v_expired, v_due
      FROM switchboard.scope(p_endpoint, p_lease_ttl_seconds) g;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('forbidden', 'endpoint is not active');
    END IF;
    IF p_queue IS NOT NULL THEN
        IF NOT p_queue = ANY (v_queues) THEN
            PERFORM switchboard.refuse('forbidden', 'queue is outside the granted queues');
        END IF;
        v_queues := ARRAY[p_queue];
    END IF;
    IF v_expired THEN
        PERFORM switchboard.requeue_expired(p_endpoint);
    END IF;
    IF v_due THEN
        PERFORM switchboard.release_retries(p_endpoint);
    END IF;

    IF p_require_fence THEN
        v_token := switchboard.new_token('sbl_');
    END IF;
    UPDATE switchboard.todos u
       SET state            = 'claimed',
           owner            = v_owner,
           lease_expires_at = now() + v_lease,
           lease_token_hash = sha256(convert_to(v_token, 'UTF8')),
           attempt          = u.attempt + 1,
           updated_at       = now()
     WHERE u.id = (SELECT c.id
                     FROM switchboard.todos c
                    WHERE c.endpoint_id = p_endpoint AND c.queue = ANY (v_queues) AND c.state = 'pending'
                      AND c.attempt < c.max_attempts
                    ORDER BY c.created_at, c.id
                    LIMIT 1
                      FOR UPDATE SKIP LOCKED)
    RETURNING switchboard.todo_json(u, true) INTO v_todo;
    IF NOT FOUND THEN
        RETURN '{"empty": true}'::jsonb;
    ELSIF v_token IS NULL THEN
        RETURN jsonb_build_object('empty', false, 'todo', v_todo);
    END IF;
    RETURN jsonb_build_object('empty', false, 'lease_token', v_token, 'todo', v_todo);
END
$$;

CREATE OR REPLACE FUNCTION switchboard.heartbeat(
    p_endpoint uuid, p_todo uuid, p_lease_ttl_seconds int DEFAULT NULL, p_lease_token text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_todo jsonb;
BEGIN
    UPDATE switchboard.todos u
       SET lease_expires_at = now() + g.lease,
           updated_at       = now()
      FROM switchboard.scope(p_endpoint, p_lease_ttl_seconds) g
     WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
       AND switchboard.holds(u, g.queues, g.owner, p_lease_token)
    RETURNING switchboard.todo_json(u) INTO v_todo;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo);
    END IF;
    RETURN v_todo;
END
$$;

CREATE OR REPLACE FUNCTION switchboard.complete(
    p_endpoint uuid, p_todo uuid, p_result jsonb DEFAULT NULL, p_lease_token text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_todo jsonb;
BEGIN
    UPDATE switchboard.todos u
       SET state = 'done', result = p_result, completed_at = now(),
           lease_expires_at = NULL, lease_token_hash = NULL, updated_at = now()
      FROM switchboard.scope(p_endpoint) g
     WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
       AND switchboard.holds(u, g.queues, g.owner, p_lease_token)
    RETURNING switchboard.todo_json(u) INTO v_todo;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo);
    END IF;
    RETURN v_todo;
END
$$;

CREATE OR REPLACE FUNCTION switchboard.fail(
    p_endpoint uuid, p_todo uuid, p_result jsonb DEFAULT NULL, p_lease_token text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_todo jsonb;
BEGIN
    UPDATE switchboard.todos u
       SET state            = 'failed',
           result           = p_result,
           next_retry_at    = CASE WHEN u.attempt < u.max_attempts THEN now() + switchboard.backoff(u.attempt) END,
           completed_at     = CASE WHEN u.attempt < u.max_attempts THEN NULL ELSE now() END,
           lease_expires_at = NULL,
           lease_token_hash = NULL,
           updated_at       = now()
      FROM switchboard.scope(p_endpoint) g
     WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
       AND switchboard.holds(u, g.queues, g.owner, p_lease_token)
    RETURNING switchboard.todo_json(u) INTO v_todo;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo);
    END IF;
    RETURN v_todo;
END
$$;

CREATE OR REPLACE FUNCTION switchboard.release(p_endpoint uuid, p_todo uuid, p_lease_token text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
    v_todo  jsonb;
BEGIN
    -- A todo released on its last attempt could never be claimed again: it is dead-lettered.
    UPDATE switchboard.todos u
       SET state            = CASE WHEN u.attempt < u.max_attempts THEN 'pending' ELSE 'failed' END,
           owner            = CASE WHEN u.attempt < u.max_attempts THEN NULL ELSE u.owner END,
           result           = CASE WHEN u.attempt < u.max_attempts THEN u.result
                                   ELSE '{"error": "released_without_attempts_left"}' END,
           completed_at     = CASE WHEN u.attempt < u.max_attempts THEN NULL ELSE now() END,
           lease_expires_at = NULL,
           lease_token_hash = NULL,
           ready_at         = now(),
           updated_at       = now()
      FROM switchboard.scope(p_endpoint) g
     WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
       AND switchboard.holds(u, g.queues, g.owner, p_lease_token)
    RETURNING u.state, switchboard.todo_json(u) INTO v_state, v_todo;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo);
    END IF;
    IF v_state = 'pending' THEN
        PERFORM switchboard.ring();
    END IF;
    RETURN v_todo;
END
$$;

-- Superseded by scope().
DROP FUNCTION switchboard.lease_interval(int, int);

-- 3. MCP servers trust a session's credential until they hear that its endpoint was revoked
--    (server/mcpapi, trustedSession). They must hear of every revocation, however it is made:
--    endpoint_revoke() or a DBA's UPDATE. A trigger sends the notification, so no path can
--    forget it (and endpoint_revoke() no longer sends its own).
CREATE FUNCTION switchboard.notify_revoked() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('switchboard_revoked', NEW.id::text);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION switchboard.notify_revoked() IS
  'Trigger: NOTIFY switchboard_revoked with the endpoint id when an endpoint leaves the active state.';

CREATE TRIGGER endpoints_revoked
    AFTER UPDATE OF state ON switchboard.endpoints
    FOR EACH ROW WHEN (OLD.state = 'active' AND NEW.state <> 'active')
    EXECUTE FUNCTION switchboard.notify_revoked();

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
    UPDATE switchboard.todos
       SET state = 'failed', next_retry_at = NULL, lease_expires_at = NULL, lease_token_hash = NULL,
           result = '{"error": "endpoint_revoked"}', completed_at = now(), updated_at = now()
     WHERE endpoint_id = p_endpoint
       AND (state IN ('pending', 'claimed') OR next_retry_at IS NOT NULL);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN jsonb_build_object('endpoint_id', p_endpoint, 'state', 'revoked', 'todos_dead_lettered', v_count);
END
$$;

-- 4. The `next` option of complete, fail and release (contract §4.4) as one function: one
--    statement per todo for an agent draining a queue, instead of a pipelined
--    BEGIN / verb / SAVEPOINT / claim_next / COMMIT from Go.
CREATE FUNCTION switchboard.finish_and_claim_next(
    p_endpoint uuid, p_todo uuid, p_verb text, p_result jsonb DEFAULT NULL, p_lease_token text DEFAULT NULL,
    p_queue text DEFAULT NULL, p_lease_ttl_seconds int DEFAULT NULL, p_require_fence boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_todo  jsonb;
    v_next  jsonb;
    v_state text;
    v_code  text;
BEGIN
    -- A refused transition raises here: nothing is claimed either.
    IF p_verb = 'complete' THEN
        v_todo := switchboard.complete(p_endpoint, p_todo, p_result, p_lease_token);
    ELSIF p_verb = 'fail' THEN
        v_todo := switchboard.fail(p_endpoint, p_todo, p_result, p_lease_token);
    ELSIF p_verb = 'release' THEN
        v_todo := switchboard.release(p_endpoint, p_todo, p_lease_token);
    ELSE
        PERFORM switchboard.refuse('invalid_argument', 'verb must be complete, fail or release');
    END IF;

    -- The claim runs in a subtransaction: when it fails, the transition above still stands and
    -- the refusal is reported as next.error. Unexpected errors are not echoed, only logged.
    BEGIN
        v_next := switchboard.claim_next(p_endpoint, p_queue, p_lease_ttl_seconds, p_require_fence);
    EXCEPTION WHEN OTHERS THEN
        v_state := SQLSTATE;
        SELECT e.code INTO v_code FROM switchboard.error_codes e WHERE e.sqlstate = v_state;
        IF v_code IS NULL THEN
            RAISE LOG 'switchboard.finish_and_claim_next: next claim for endpoint % failed: % %',
                p_endpoint, SQLSTATE, SQLERRM;
            v_next := '{"error": "internal: internal error"}';
        ELSE
            v_next := jsonb_build_object('error', v_code || ': ' || SQLERRM);
        END IF;
    END;
    RETURN v_todo || jsonb_build_object('next', v_next);
END
$$;
COMMENT ON FUNCTION switchboard.finish_and_claim_next(uuid, uuid, text, jsonb, text, text, int, boolean) IS
  'complete, fail or release a held todo, then claim_next in the same transaction; the todo with next: claim_next''s result, or {error: "<code>: <message>"} when the claim failed (the transition stands).';
