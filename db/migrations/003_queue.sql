-- The queue: create, read, claim, lease upkeep, finish, and the reaper.
-- Every function takes the calling endpoint first; a todo of another endpoint is indistinguishable
-- from one that does not exist. Refusals raise the SQLSTATEs of switchboard.error_codes.

-- Why a todo verb found nothing to change: not_found, then forbidden, then conflict. Read-only.
CREATE FUNCTION switchboard.refuse_todo(p_endpoint uuid, p_todo uuid, p_queues text[]) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_queue text;
BEGIN
    SELECT queue INTO v_queue FROM switchboard.todos WHERE id = p_todo AND endpoint_id = p_endpoint;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'todo not found');
    ELSIF NOT v_queue = ANY (p_queues) THEN
        PERFORM switchboard.refuse('forbidden', 'todo queue is outside the granted queues');
    END IF;
    PERFORM switchboard.refuse('conflict', 'todo is not in a state that allows this, or is held by another worker');
END
$$;
COMMENT ON FUNCTION switchboard.refuse_todo(uuid, uuid, text[]) IS
  'Raises the refusal for a todo verb that matched no row: not_found (unknown or foreign), forbidden (queue outside grant), else conflict.';

-- True when the caller holds the todo: claimed, in a granted queue, owned by the caller's agent, and
-- the fence matches (a fenced claim needs its token; an unfenced one takes none). Inlined by the planner.
CREATE FUNCTION switchboard.holds(t switchboard.todos, p_queues text[], p_owner text, p_token text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT t.state = 'claimed'
       AND t.queue = ANY (p_queues)
       AND t.owner = p_owner
       AND t.lease_token_hash IS NOT DISTINCT FROM sha256(convert_to(p_token, 'UTF8'))
$$;
COMMENT ON FUNCTION switchboard.holds(switchboard.todos, text[], text, text) IS
  'Whether the caller (granted queues, agent owner, fence token) holds a claimed todo.';

CREATE FUNCTION switchboard.create_todo(
    p_endpoint        uuid,
    p_queue           text,
    p_title           text,
    p_payload         jsonb DEFAULT NULL,
    p_idempotency_key text DEFAULT NULL,
    p_source          text DEFAULT 'operator',
    p_kind            text DEFAULT NULL,
    p_routing         jsonb DEFAULT NULL,
    p_event_id        bigint DEFAULT NULL,
    OUT todo_id uuid,
    OUT created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    SELECT state INTO v_state FROM switchboard.endpoints WHERE id = p_endpoint;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'endpoint not found');
    ELSIF v_state <> 'active' THEN
        PERFORM switchboard.refuse('forbidden', 'endpoint is not active');
    ELSIF p_queue IS NULL OR p_queue !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$' THEN
        PERFORM switchboard.refuse('invalid_argument', 'queue name is invalid');
    END IF;

    -- Two tries: a live duplicate can finish (and free its key) between our insert and our read.
    FOR i IN 1..2 LOOP
        INSERT INTO switchboard.todos (endpoint_id, queue, title, source, kind, payload, payload_size,
                                       routing, event_id, idempotency_key, max_attempts)
        VALUES (p_endpoint, p_queue, coalesce(p_title, ''), coalesce(p_source, 'operator'), p_kind, p_payload,
                coalesce(octet_length(p_payload::text), 0), p_routing, p_event_id, p_idempotency_key,
                switchboard.setting('max_attempts'))
        ON CONFLICT (endpoint_id, idempotency_key)
            WHERE idempotency_key IS NOT NULL AND (state IN ('pending', 'claimed') OR next_retry_at IS NOT NULL)
            DO NOTHING
        RETURNING id INTO todo_id;
        IF FOUND THEN
            created := true;
            PERFORM switchboard.ring();
            RETURN;
        END IF;

        SELECT id INTO todo_id
          FROM switchboard.todos
         WHERE endpoint_id = p_endpoint AND idempotency_key = p_idempotency_key
           AND (state IN ('pending', 'claimed') OR next_retry_at IS NOT NULL);
        IF FOUND THEN
            created := false;
            RETURN;
        END IF;
    END LOOP;
    PERFORM switchboard.refuse('conflict', 'idempotency key is contended; retry');
END
$$;
COMMENT ON FUNCTION switchboard.create_todo(uuid, text, text, jsonb, text, text, text, jsonb, bigint) IS
  'Insert a pending todo for an endpoint. A live todo with the same idempotency key wins: nothing is inserted and created=false. Rings the doorbell.';

CREATE FUNCTION switchboard.list_todos(
    p_endpoint uuid, p_queue text DEFAULT NULL, p_state text DEFAULT NULL, p_limit int DEFAULT 50) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    s record;
    v_queues text[];
BEGIN
    s := switchboard.caller(p_endpoint);
    v_queues := s.queues;
    IF p_queue IS NOT NULL THEN
        IF NOT p_queue = ANY (s.queues) THEN
            PERFORM switchboard.refuse('forbidden', 'queue is outside the granted queues');
        END IF;
        v_queues := ARRAY[p_queue];
    END IF;
    IF p_state IS NOT NULL AND p_state NOT IN ('pending', 'claimed', 'done', 'failed') THEN
        PERFORM switchboard.refuse('invalid_argument', 'state must be one of pending, claimed, done, failed');
    END IF;
    RETURN jsonb_build_object('todos', coalesce(
        (SELECT jsonb_agg(switchboard.todo_json(t) ORDER BY t.created_at DESC, t.id DESC)
           FROM (SELECT *
                   FROM switchboard.todos
                  WHERE endpoint_id = p_endpoint
                    AND queue = ANY (v_queues)
                    AND (p_state IS NULL OR state = p_state)
                  ORDER BY created_at DESC, id DESC
                  LIMIT greatest(1, least(coalesce(p_limit, 50), 200))) t),
        '[]'::jsonb));
END
$$;
COMMENT ON FUNCTION switchboard.list_todos(uuid, text, text, int) IS
  'Newest-first todos of an endpoint in its granted queues (or one granted queue), optional state; limit default 50, max 200.';

CREATE FUNCTION switchboard.get_todo(p_endpoint uuid, p_todo uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    s record;
    t switchboard.todos;
BEGIN
    s := switchboard.caller(p_endpoint);
    SELECT * INTO t FROM switchboard.todos WHERE id = p_todo AND endpoint_id = p_endpoint;
    IF NOT FOUND OR NOT t.queue = ANY (s.queues) THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo, s.queues);
    END IF;
    RETURN switchboard.todo_json(t, true) || jsonb_build_object('result', t.result);
END
$$;
COMMENT ON FUNCTION switchboard.get_todo(uuid, uuid) IS 'One todo of the endpoint with payload, routing trace and result.';

-- Expired leases: back to pending while attempts remain, else dead-lettered. p_endpoint NULL = all.
-- A plain guarded UPDATE: a row a concurrent claim or reaper changed first is re-checked after its
-- lock is released and skipped when no longer expired, so no lease is requeued twice. (A
-- SKIP LOCKED pass would write a lock record for every row first: a third more WAL.)
CREATE FUNCTION switchboard.requeue_expired(p_endpoint uuid DEFAULT NULL, OUT requeued int, OUT dead_lettered int)
LANGUAGE plpgsql AS $$
BEGIN
    WITH moved AS (
        UPDATE switchboard.todos t
           SET state            = CASE WHEN t.attempt < t.max_attempts THEN 'pending' ELSE 'failed' END,
               owner            = CASE WHEN t.attempt < t.max_attempts THEN NULL ELSE t.owner END,
               result           = CASE WHEN t.attempt < t.max_attempts THEN t.result
                                       ELSE jsonb_strip_nulls(jsonb_build_object('error', 'lease_expired',
                                                                                 'previous', t.result)) END,
               completed_at     = CASE WHEN t.attempt < t.max_attempts THEN NULL ELSE now() END,
               lease_expires_at = NULL,
               lease_token_hash = NULL,
               ready_at         = now(),
               updated_at       = now()
         WHERE t.state = 'claimed' AND t.lease_expires_at < now()
           AND (p_endpoint IS NULL OR t.endpoint_id = p_endpoint)
        RETURNING t.state
    )
    SELECT count(*) FILTER (WHERE state = 'pending'),
           count(*) FILTER (WHERE state = 'failed')
      INTO requeued, dead_lettered
      FROM moved;
    IF requeued > 0 THEN
        PERFORM switchboard.ring();
    END IF;
END
$$;
COMMENT ON FUNCTION switchboard.requeue_expired(uuid) IS
  'Expired leases (of one endpoint, or all when NULL): pending while attempts remain, else dead letter. Safe beside claims and other reapers (rows are re-checked under lock).';

-- Parked retries whose window has passed: back to pending. p_endpoint NULL = all.
CREATE FUNCTION switchboard.release_retries(p_endpoint uuid DEFAULT NULL) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_count int;
BEGIN
    WITH moved AS (
        UPDATE switchboard.todos t
           SET state = 'pending', owner = NULL, next_retry_at = NULL, ready_at = now(), updated_at = now()
         WHERE t.next_retry_at <= now()
           AND (p_endpoint IS NULL OR t.endpoint_id = p_endpoint)
        RETURNING t.id
    )
    SELECT count(*) INTO v_count FROM moved;
    IF v_count > 0 THEN
        PERFORM switchboard.ring();
    END IF;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION switchboard.release_retries(uuid) IS
  'Parked retries (of one endpoint, or all when NULL) whose next_retry_at has passed go back to pending.';

CREATE FUNCTION switchboard.reap(OUT requeued int, OUT dead_lettered int, OUT retries_released int)
LANGUAGE plpgsql AS $$
BEGIN
    requeued := 0;
    dead_lettered := 0;
    retries_released := 0;
    -- One reaper at a time: servers and pg_cron may all call this; the others return zeros.
    IF NOT pg_try_advisory_xact_lock(hashtext('switchboard.reap')) THEN
        RETURN;
    END IF;
    SELECT r.requeued, r.dead_lettered INTO requeued, dead_lettered FROM switchboard.requeue_expired(NULL) r;
    retries_released := switchboard.release_retries(NULL);
END
$$;
COMMENT ON FUNCTION switchboard.reap() IS
  'The reaper: requeue or dead-letter expired leases, release due retries. Safe to run from several servers and pg_cron at once (one runs, the others return zeros).';

CREATE FUNCTION switchboard.claim(
    p_endpoint uuid, p_todo uuid, p_lease_ttl_seconds int DEFAULT NULL, p_require_fence boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    t switchboard.todos;
    v_token text;
BEGIN
    s := switchboard.caller(p_endpoint);
    IF p_require_fence THEN
        v_token := switchboard.new_token('sbl_');
    END IF;
    UPDATE switchboard.todos
       SET state            = 'claimed',
           owner            = s.owner,
           lease_expires_at = now() + switchboard.lease_interval(p_lease_ttl_seconds, s.lease_ttl_seconds),
           lease_token_hash = sha256(convert_to(v_token, 'UTF8')),
           attempt          = attempt + 1,
           next_retry_at    = NULL,
           updated_at       = now()
     WHERE id = p_todo AND endpoint_id = p_endpoint
       AND queue = ANY (s.queues)
       AND attempt < max_attempts
       AND (state = 'pending'
            OR (state = 'claimed' AND lease_expires_at < now())
            OR (state = 'failed' AND next_retry_at <= now()))
    RETURNING * INTO t;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo, s.queues);
    END IF;
    RETURN jsonb_strip_nulls(jsonb_build_object('lease_token', v_token)) || switchboard.todo_json(t, true);
END
$$;
COMMENT ON FUNCTION switchboard.claim(uuid, uuid, int, boolean) IS
  'Claim one todo by id: pending, expired lease, or due retry, with attempts left. Lease from now; optional fence token returned once.';

CREATE FUNCTION switchboard.claim_next(
    p_endpoint uuid, p_queue text DEFAULT NULL, p_lease_ttl_seconds int DEFAULT NULL,
    p_require_fence boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    t switchboard.todos;
    v_queues text[];
    v_token text;
BEGIN
    s := switchboard.caller(p_endpoint);
    v_queues := s.queues;
    IF p_queue IS NOT NULL THEN
        IF NOT p_queue = ANY (s.queues) THEN
            PERFORM switchboard.refuse('forbidden', 'queue is outside the granted queues');
        END IF;
        v_queues := ARRAY[p_queue];
    END IF;

    -- Take over this endpoint's expired leases and due retries first, so that no work waits for
    -- the reaper and they compete with pending work in created_at order. The takeovers write, so
    -- they run only when a cheap probe of the in-flight indexes finds something to take over.
    IF EXISTS (SELECT 1 FROM switchboard.todos
                WHERE state = 'claimed' AND lease_expires_at < now() AND endpoint_id = p_endpoint) THEN
        PERFORM switchboard.requeue_expired(p_endpoint);
    END IF;
    IF EXISTS (SELECT 1 FROM switchboard.todos WHERE next_retry_at <= now() AND endpoint_id = p_endpoint) THEN
        PERFORM switchboard.release_retries(p_endpoint);
    END IF;

    IF p_require_fence THEN
        v_token := switchboard.new_token('sbl_');
    END IF;
    UPDATE switchboard.todos u
       SET state            = 'claimed',
           owner            = s.owner,
           lease_expires_at = now() + switchboard.lease_interval(p_lease_ttl_seconds, s.lease_ttl_seconds),
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
    RETURNING u.* INTO t;
    IF NOT FOUND THEN
        RETURN '{"empty": true}'::jsonb;
    END IF;
    RETURN jsonb_strip_nulls(jsonb_build_object('empty', false, 'lease_token', v_token))
        || jsonb_build_object('todo', switchboard.todo_json(t, true));
END
$$;
COMMENT ON FUNCTION switchboard.claim_next(uuid, text, int, boolean) IS
  'Claim the oldest claimable todo (created_at, id) in the granted queues or one granted queue, FOR UPDATE SKIP LOCKED. {"empty": true} when there is none.';

CREATE FUNCTION switchboard.heartbeat(
    p_endpoint uuid, p_todo uuid, p_lease_ttl_seconds int DEFAULT NULL, p_lease_token text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    t switchboard.todos;
BEGIN
    s := switchboard.caller(p_endpoint);
    UPDATE switchboard.todos u
       SET lease_expires_at = now() + switchboard.lease_interval(p_lease_ttl_seconds, s.lease_ttl_seconds),
           updated_at       = now()
     WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
       AND switchboard.holds(u, s.queues, s.owner, p_lease_token)
    RETURNING u.* INTO t;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo, s.queues);
    END IF;
    RETURN switchboard.todo_json(t);
END
$$;
COMMENT ON FUNCTION switchboard.heartbeat(uuid, uuid, int, text) IS
  'Extend a held lease: lease_expires_at = now + ttl (reset, not added). conflict unless the caller holds it.';

CREATE FUNCTION switchboard.complete(
    p_endpoint uuid, p_todo uuid, p_result jsonb DEFAULT NULL, p_lease_token text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    t switchboard.todos;
BEGIN
    s := switchboard.caller(p_endpoint);
    UPDATE switchboard.todos u
       SET state = 'done', result = p_result, completed_at = now(),
           lease_expires_at = NULL, lease_token_hash = NULL, updated_at = now()
     WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
       AND switchboard.holds(u, s.queues, s.owner, p_lease_token)
    RETURNING u.* INTO t;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo, s.queues);
    END IF;
    RETURN switchboard.todo_json(t);
END
$$;
COMMENT ON FUNCTION switchboard.complete(uuid, uuid, jsonb, text) IS
  'Finish a held todo: done, with result. conflict unless the caller holds it.';

CREATE FUNCTION switchboard.fail(
    p_endpoint uuid, p_todo uuid, p_result jsonb DEFAULT NULL, p_lease_token text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    t switchboard.todos;
BEGIN
    s := switchboard.caller(p_endpoint);
    UPDATE switchboard.todos u
       SET state            = 'failed',
           result           = p_result,
           next_retry_at    = CASE WHEN u.attempt < u.max_attempts THEN now() + switchboard.backoff(u.attempt) END,
           completed_at     = CASE WHEN u.attempt < u.max_attempts THEN NULL ELSE now() END,
           lease_expires_at = NULL,
           lease_token_hash = NULL,
           updated_at       = now()
     WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
       AND switchboard.holds(u, s.queues, s.owner, p_lease_token)
    RETURNING u.* INTO t;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo, s.queues);
    END IF;
    RETURN switchboard.todo_json(t);
END
$$;
COMMENT ON FUNCTION switchboard.fail(uuid, uuid, jsonb, text) IS
  'Fail a held todo: parked retry at now + backoff(attempt) while attempts remain, else dead letter (next_retry_at null). Owner kept for display.';

CREATE FUNCTION switchboard.release(p_endpoint uuid, p_todo uuid, p_lease_token text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    t switchboard.todos;
BEGIN
    s := switchboard.caller(p_endpoint);
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
     WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
       AND switchboard.holds(u, s.queues, s.owner, p_lease_token)
    RETURNING u.* INTO t;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo, s.queues);
    END IF;
    IF t.state = 'pending' THEN
        PERFORM switchboard.ring();
    END IF;
    RETURN switchboard.todo_json(t);
END
$$;
COMMENT ON FUNCTION switchboard.release(uuid, uuid, text) IS
  'Give a held todo back: pending, owner and lease cleared, attempt unchanged (dead letter when no attempt is left). Rings the doorbell.';

-- Doorbell reads. Only todos the endpoint could claim (granted queues) ring it.
CREATE FUNCTION switchboard.ready_todos(p_endpoint uuid, p_since timestamptz, p_limit int DEFAULT 64)
RETURNS TABLE (id uuid, queue text, title text, source text, kind text, ready_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT t.id, t.queue, t.title, t.source, t.kind, t.ready_at
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.endpoint_id = p_endpoint AND t.state = 'pending' AND t.ready_at >= p_since
       AND t.queue = ANY (e.queues)
     ORDER BY t.ready_at
     LIMIT p_limit
$$;
COMMENT ON FUNCTION switchboard.ready_todos(uuid, timestamptz, int) IS
  'Doorbell: pending todos of an endpoint (granted queues) that became ready at or after p_since, oldest first.';

CREATE FUNCTION switchboard.oldest_pending(p_endpoint uuid, p_limit int DEFAULT 3)
RETURNS TABLE (id uuid, queue text, title text, source text, kind text, ready_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT t.id, t.queue, t.title, t.source, t.kind, t.ready_at
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.endpoint_id = p_endpoint AND t.state = 'pending' AND t.queue = ANY (e.queues)
     ORDER BY t.created_at, t.id
     LIMIT p_limit
$$;
COMMENT ON FUNCTION switchboard.oldest_pending(uuid, int) IS
  'Doorbell on attach: the oldest pending todos of an endpoint in its granted queues.';
