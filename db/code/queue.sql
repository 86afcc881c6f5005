-- The queue: create, list, read, claim, and finish todos.
--
-- Every agent-facing function takes the calling endpoint first; a todo of another endpoint is
-- indistinguishable from one that does not exist. Refusals raise the SQLSTATEs of
-- switchboard.error_codes. The holder verbs (claim, heartbeat, complete, fail, release) are one
-- UPDATE each on the happy path: scope() and holds() are SQL functions the planner inlines, and
-- the reason for a refusal (refuse_todo) is looked up only when nothing matched.

-- The todo row as agents see it (list, and every verb that returns a todo). One expression and
-- no subquery, so the planner inlines it into the caller's statement: called as a function it
-- cost about 25 us a row, half of a 50-row list_todos.
CREATE OR REPLACE FUNCTION switchboard.todo_json(t switchboard.todos) RETURNS jsonb
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
$$;
COMMENT ON FUNCTION switchboard.todo_json(switchboard.todos) IS
  'The todo shape of the MCP surface (times RFC 3339 UTC).';

-- What claim and get add to todo_json: payload and routing. A todo from a delivery holds no
-- payload of its own: it is the event's, read here (one PK lookup). The subquery keeps the
-- planner from inlining this function, so claim and claim_next, the hot paths, spell the same
-- object out in their RETURNING; get_todo calls it.
CREATE OR REPLACE FUNCTION switchboard.todo_detail_json(t switchboard.todos) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'payload', CASE WHEN t.event_id IS NULL THEN t.payload
                        ELSE (SELECT ev.payload FROM switchboard.webhook_events ev WHERE ev.id = t.event_id) END,
        'routing', t.routing)
$$;
COMMENT ON FUNCTION switchboard.todo_detail_json(switchboard.todos) IS
  'Payload (the event''s for a todo from a delivery) and routing of a todo, for claim and get.';

-- What an active endpoint may do, as a row source: its granted queues, the owner string of its
-- agent, and the lease a claim or heartbeat gets (the call's ask, else the endpoint's default,
-- else lease_default_seconds; clamped to 1..lease_max_seconds). No row when the endpoint is
-- unknown or revoked. A set-returning SQL function so the planner inlines it into the caller's
-- statement (a scalar SQL function with a subquery would not be inlined).
CREATE OR REPLACE FUNCTION switchboard.scope(p_endpoint uuid, p_lease_ask int DEFAULT NULL)
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

-- True when the caller holds the todo: claimed, in a granted queue, owned by the caller's agent, and
-- the fence matches (a fenced claim needs its token; an unfenced one takes none). Inlined by the planner.
CREATE OR REPLACE FUNCTION switchboard.holds(t switchboard.todos, p_queues text[], p_owner text, p_token text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT t.state = 'claimed'
       AND t.queue = ANY (p_queues)
       AND t.owner = p_owner
       AND t.lease_token_hash IS NOT DISTINCT FROM sha256(convert_to(p_token, 'UTF8'))
$$;
COMMENT ON FUNCTION switchboard.holds(switchboard.todos, text[], text, text) IS
  'Whether the caller (granted queues, agent owner, fence token) holds a claimed todo.';

-- Why a todo verb found nothing to change: forbidden (endpoint not active), not_found (unknown
-- or another endpoint's todo), forbidden (queue outside the grant), else conflict. Read-only.
CREATE OR REPLACE FUNCTION switchboard.refuse_todo(p_endpoint uuid, p_todo uuid) RETURNS void
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

-- The bounds of server/safejson in SQL, for what reaches the database without passing the Go
-- door: operator pushes and rows stored before the bounds existed (migration 002). jsonb cannot
-- hold NUL or unpaired surrogates at all, so nesting and number range are what is left.
-- jsonpath's .** walks the value in C: about 20 ms (nesting) and 200-400 ms (numbers) for 5 MiB,
-- under 0.1 ms for a few KiB, so the webhook receiver, which checks in Go, does not call it.
CREATE OR REPLACE FUNCTION switchboard.undeliverable(p_value jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_value IS NULL THEN NULL
        WHEN jsonb_path_exists(p_value, 'strict $.**{64 to last} ? (@.type() == "array" || @.type() == "object")')
            THEN 'JSON nested deeper than 64 levels'
        WHEN jsonb_path_exists(p_value, 'strict $.** ? (@.type() == "number" && (@ > 1.7976931348623157e308
                 || @ < -1.7976931348623157e308 || (@ != 0 && @ < 4.9e-324 && @ > -4.9e-324)))')
            THEN 'JSON number outside the range of a 64-bit float'
    END
$$;
COMMENT ON FUNCTION switchboard.undeliverable(jsonb) IS
  'Why a JSON value cannot be handed to a strict client (nested deeper than 64 levels, or a number outside binary64''s range), or NULL when it can. The bounds of the Go door (server/safejson), for values that reach SQL without it.';

CREATE OR REPLACE FUNCTION switchboard.create_todo(
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
    ELSIF p_event_id IS NULL AND switchboard.undeliverable(p_payload) IS NOT NULL THEN
        -- Not a delivery (the receiver checked those): a strict client could never decode it.
        PERFORM switchboard.refuse('invalid_argument', 'payload: ' || switchboard.undeliverable(p_payload));
    END IF;

    -- Two tries: a live duplicate can finish (and free its key) between our insert and our read.
    FOR i IN 1..2 LOOP
        INSERT INTO switchboard.todos (endpoint_id, queue, title, source, kind, payload, payload_size,
                                       routing, event_id, idempotency_key, max_attempts)
        -- From a delivery (p_event_id): the payload stays in the event, p_payload (the same
        -- value) only sizes it. One copy per delivery, however many targets.
        VALUES (p_endpoint, p_queue, coalesce(p_title, ''), coalesce(p_source, 'operator'), p_kind,
                CASE WHEN p_event_id IS NULL THEN p_payload END,
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
  'Insert a pending todo for an endpoint (with p_event_id its payload is the event''s, not a copy). A live todo with the same idempotency key wins: nothing is inserted and created=false. Rings the doorbell.';

-- Many todos in one statement, for the operator CLI (`todo push --file`) and DBAs: p_items is a
-- JSON array of {title, payload?, key?}. The rules of create_todo (the endpoint active, a valid
-- queue, a payload a strict client can decode, a live todo with the same key wins, the doorbell)
-- hold for each item, and any refusal refuses them all, naming the item (1-based). Answers
-- {created, ids}: one id per item, in item order. The ids are drawn sorted and given in item
-- order: the todos share created_at, so claims take them in the order pushed. A key repeated
-- within p_items gives the later items the first one's todo.
CREATE OR REPLACE FUNCTION switchboard.push_many(
    p_endpoint uuid, p_queue text, p_items jsonb, p_source text DEFAULT 'operator')
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_state   text;
    v_bad     record;
    v_created int;
    v_ids     uuid[];
    v_missing int;
BEGIN
    SELECT state INTO v_state FROM switchboard.endpoints WHERE id = p_endpoint;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'endpoint not found');
    ELSIF v_state <> 'active' THEN
        PERFORM switchboard.refuse('forbidden', 'endpoint is not active');
    ELSIF p_queue IS NULL OR p_queue !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$' THEN
        PERFORM switchboard.refuse('invalid_argument', 'queue name is invalid');
    ELSIF jsonb_typeof(p_items) IS DISTINCT FROM 'array' OR jsonb_array_length(p_items) = 0 THEN
        PERFORM switchboard.refuse('invalid_argument', 'items must be a non-empty JSON array');
    END IF;
    SELECT b.ord, b.why INTO v_bad
      FROM (SELECT i.ord, CASE
                       WHEN jsonb_typeof(i.item) <> 'object' THEN 'not a JSON object'
                       WHEN jsonb_typeof(i.item -> 'title') IS DISTINCT FROM 'string' THEN 'title must be a string'
                       WHEN jsonb_typeof(i.item -> 'key') NOT IN ('string', 'null') THEN 'key must be a string'
                       WHEN EXISTS (SELECT 1 FROM jsonb_object_keys(i.item) k WHERE k NOT IN ('title', 'payload', 'key'))
                           THEN 'only title, payload and key are allowed'
                       ELSE 'payload: ' || switchboard.undeliverable(nullif(i.item -> 'payload', 'null')) END AS why
              FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(item, ord)) b
     WHERE b.why IS NOT NULL
     ORDER BY b.ord
     LIMIT 1;
    IF FOUND THEN
        PERFORM switchboard.refuse('invalid_argument', format('item %s: %s', v_bad.ord, v_bad.why));
    END IF;

    -- Random ids, sorted, one per item in item order.
    v_ids := ARRAY(SELECT gen_random_uuid() FROM generate_series(1, jsonb_array_length(p_items)) ORDER BY 1);
    WITH inserted AS (
        INSERT INTO switchboard.todos (id, endpoint_id, queue, title, source, payload, payload_size,
                                       idempotency_key, max_attempts)
        SELECT v_ids[i.ord::int], p_endpoint, p_queue, i.item ->> 'title', coalesce(p_source, 'operator'),
               nullif(i.item -> 'payload', 'null'),
               coalesce(octet_length(nullif(i.item -> 'payload', 'null')::text), 0),
               i.item ->> 'key', switchboard.setting('max_attempts')
          FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(item, ord)
        ON CONFLICT (endpoint_id, idempotency_key)
            WHERE idempotency_key IS NOT NULL AND (state IN ('pending', 'claimed') OR next_retry_at IS NOT NULL)
            DO NOTHING
        RETURNING 1
    )
    SELECT count(*) INTO v_created FROM inserted;

    -- Each item's todo: its own when it was inserted, else the live todo that holds its key
    -- (inserted above for an earlier item, or committed before). None when that todo finished in
    -- between: create_todo tries again, here the caller does.
    SELECT array_agg(coalesce(t.id, k.id) ORDER BY i.ord), count(*) FILTER (WHERE t.id IS NULL AND k.id IS NULL)
      INTO v_ids, v_missing
      FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(item, ord)
      LEFT JOIN switchboard.todos t ON t.id = v_ids[i.ord::int]
      LEFT JOIN switchboard.todos k
        ON t.id IS NULL AND k.endpoint_id = p_endpoint AND k.idempotency_key = i.item ->> 'key'
       AND (k.state IN ('pending', 'claimed') OR k.next_retry_at IS NOT NULL);
    IF v_missing > 0 THEN
        PERFORM switchboard.refuse('conflict', 'idempotency key is contended; retry');
    END IF;
    IF v_created > 0 THEN
        PERFORM switchboard.ring();
    END IF;
    RETURN jsonb_build_object('created', v_created, 'ids', to_jsonb(v_ids));
END
$$;
COMMENT ON FUNCTION switchboard.push_many(uuid, text, jsonb, text) IS
  'Insert many pending todos in one statement (p_items: [{title, payload?, key?}]), as create_todo would one by one; all or nothing. Returns {created, ids} (one id per item, the live todo''s for a taken key). Rings the doorbell.';

-- Returns json, not jsonb: json_agg appends each row's text, where jsonb_agg inside
-- jsonb_build_object copied the array again (50 todos: 1.1-1.7 ms -> 0.5 ms). The operators ->
-- and ->> work on json; the jsonb_* functions need a cast.
CREATE OR REPLACE FUNCTION switchboard.list_todos(
    p_endpoint uuid, p_queue text DEFAULT NULL, p_state text DEFAULT NULL, p_limit int DEFAULT 50) RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_queues text[] := (switchboard.caller(p_endpoint)).queues;
BEGIN
    IF p_queue IS NOT NULL THEN
        IF NOT p_queue = ANY (v_queues) THEN
            PERFORM switchboard.refuse('forbidden', 'queue is outside the granted queues');
        END IF;
        v_queues := ARRAY[p_queue];
    END IF;
    IF p_state IS NOT NULL AND p_state NOT IN ('pending', 'claimed', 'done', 'failed', 'cancelled') THEN
        PERFORM switchboard.refuse('invalid_argument', 'state must be one of pending, claimed, done, failed, cancelled');
    END IF;
    RETURN json_build_object('todos', coalesce(
        (SELECT json_agg(switchboard.todo_json(t) ORDER BY t.created_at DESC, t.id DESC)
           FROM (SELECT *
                   FROM switchboard.todos
                  WHERE endpoint_id = p_endpoint
                    AND queue = ANY (v_queues)
                    AND (p_state IS NULL OR state = p_state)
                  ORDER BY created_at DESC, id DESC
                  LIMIT greatest(1, least(coalesce(p_limit, 50), 200))) t),
        '[]'));
END
$$;
COMMENT ON FUNCTION switchboard.list_todos(uuid, text, text, int) IS
  'Newest-first todos of an endpoint in its granted queues (or one granted queue), optional state (pending, claimed, done, failed, cancelled); limit default 50, max 200.';

CREATE OR REPLACE FUNCTION switchboard.get_todo(p_endpoint uuid, p_todo uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_todo jsonb;
BEGIN
    SELECT switchboard.todo_json(t) || switchboard.todo_detail_json(t) || jsonb_build_object('result', t.result)
      INTO v_todo
      FROM switchboard.todos t, switchboard.scope(p_endpoint) g
     WHERE t.id = p_todo AND t.endpoint_id = p_endpoint AND t.queue = ANY (g.queues);
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo);
    END IF;
    RETURN v_todo;
END
$$;
COMMENT ON FUNCTION switchboard.get_todo(uuid, uuid) IS 'One todo of the endpoint with payload, routing trace and result.';

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
    -- todo_detail_json spelled out, as in claim_next (a non-inlined SQL function per call).
    RETURNING switchboard.todo_json(u) || jsonb_build_object(
                  'payload', CASE WHEN u.event_id IS NULL THEN u.payload
                                  ELSE (SELECT ev.payload FROM switchboard.webhook_events ev WHERE ev.id = u.event_id) END,
                  'routing', u.routing)
      INTO v_todo;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo);
    END IF;
    RETURN jsonb_strip_nulls(jsonb_build_object('lease_token', v_token)) || v_todo;
END
$$;
COMMENT ON FUNCTION switchboard.claim(uuid, uuid, int, boolean) IS
  'Claim one todo by id: pending, expired lease, or due retry, with attempts left. Lease from now; optional fence token returned once.';

CREATE OR REPLACE FUNCTION switchboard.claim_next(
    p_endpoint uuid, p_queue text DEFAULT NULL, p_lease_ttl_seconds int DEFAULT NULL,
    p_require_fence boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql
-- Without column statistics (a restored dump, whose indexes were built after the data; a table
-- vacuumed but not yet analyzed; a burst that outran autoanalyze) the planner takes the
-- endpoint's pending rows for a handful and plans the claim as "bitmap-scan them all, sort, take
-- the first": 46-56 ms a claim at 80k pending todos instead of 1 ms. With sorts off it walks
-- todos_claimable, which is in claim order, to the first row it can lock. No statement here
-- needs a sort, so nothing else changes (tests/sqltest TestColdTableClaimPlans).
SET enable_sort = off
AS $$
DECLARE
    v_queues  text[];
    v_owner   text;
    v_lease   interval;
    v_expired boolean;
    v_due     boolean;
    v_token   text;
    v_answer  jsonb;
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
    -- The answer is built once, from the row the UPDATE returns (no copy into a wrapper after).
    -- The payload is todo_detail_json's, spelled out: that function holds a subquery, so the
    -- planner cannot inline it, and a SQL function called per row is parsed and planned again on
    -- every execution of this statement (0.1-0.2 ms a claim, tests/bench pgcost). Here the
    -- subquery is part of this statement's cached plan and runs only for a delivery's todo.
    RETURNING jsonb_strip_nulls(jsonb_build_object('empty', false, 'lease_token', v_token))
              || jsonb_build_object('todo', switchboard.todo_json(u) || jsonb_build_object(
                     'payload', CASE WHEN u.event_id IS NULL THEN u.payload
                                     ELSE (SELECT ev.payload FROM switchboard.webhook_events ev WHERE ev.id = u.event_id) END,
                     'routing', u.routing))
      INTO v_answer;
    IF NOT FOUND THEN
        RETURN '{"empty": true}'::jsonb;
    END IF;
    RETURN v_answer;
END
$$;
COMMENT ON FUNCTION switchboard.claim_next(uuid, text, int, boolean) IS
  'Claim the oldest claimable todo (created_at, id) in the granted queues or one granted queue, FOR UPDATE SKIP LOCKED. {"empty": true} when there is none.';

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
COMMENT ON FUNCTION switchboard.complete(uuid, uuid, jsonb, text) IS
  'Finish a held todo: done, with result. conflict unless the caller holds it.';

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
COMMENT ON FUNCTION switchboard.fail(uuid, uuid, jsonb, text) IS
  'Fail a held todo: parked retry at now + backoff(attempt) while attempts remain, else dead letter (next_retry_at null). Owner kept for display.';

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
COMMENT ON FUNCTION switchboard.release(uuid, uuid, text) IS
  'Give a held todo back: pending, owner and lease cleared, attempt unchanged (dead letter when no attempt is left). Rings the doorbell.';

-- The `next` option of complete, fail and release as one function: one statement per todo for
-- an agent draining a queue, instead of a pipelined BEGIN / verb / SAVEPOINT / claim_next /
-- COMMIT from Go.
CREATE OR REPLACE FUNCTION switchboard.finish_and_claim_next(
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

-- Batches (contract §12): claim_next_many claims up to N todos, and complete_many, fail_many and
-- release_many finish up to 50, each in one statement. The cost of a verb is mostly per
-- statement and per transaction, not per row (docs/benchmarks.md), so a batch pays it once.
-- Each item of a finishing batch is judged on its own, without subtransactions: the UPDATE
-- changes the rows the caller holds, and the items it did not change get the refusal
-- refuse_todo would raise for them, read from the same statement's snapshot.

-- The items of a finishing batch, in the order given. An id given twice is changed once: the
-- first time (first = true); the later ones are refused as conflict. A malformed id matches
-- nothing (not_found), like an unknown one. Inlined by the planner.
CREATE OR REPLACE FUNCTION switchboard.batch_items(p_items jsonb)
RETURNS TABLE (ord int, given text, id uuid, result jsonb, token text, first boolean)
LANGUAGE sql IMMUTABLE AS $$
    SELECT i.ord::int, i.item ->> 'id', switchboard.as_uuid(i.item ->> 'id'),
           nullif(i.item -> 'result', 'null'), i.item ->> 'lease_token',
           switchboard.as_uuid(i.item ->> 'id') IS NULL
           OR row_number() OVER (PARTITION BY switchboard.as_uuid(i.item ->> 'id') ORDER BY i.ord) = 1
      FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(item, ord)
$$;
COMMENT ON FUNCTION switchboard.batch_items(jsonb) IS
  'Row source (inlined): the items [{id, result?, lease_token?}] of a finishing batch with their position, parsed id, and whether it is the first time the id appears.';

-- The bounds of a finishing batch: an array of 1 to 50 objects.
CREATE OR REPLACE FUNCTION switchboard.batch_check(p_items jsonb) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF jsonb_typeof(p_items) IS DISTINCT FROM 'array' OR jsonb_array_length(p_items) NOT BETWEEN 1 AND 50 THEN
        PERFORM switchboard.refuse('invalid_argument', 'items must be an array of 1 to 50 items');
    ELSIF EXISTS (SELECT 1 FROM jsonb_array_elements(p_items) e WHERE jsonb_typeof(e -> 'id') IS DISTINCT FROM 'string') THEN
        PERFORM switchboard.refuse('invalid_argument', 'every item must be an object with a string id');
    END IF;
END
$$;
COMMENT ON FUNCTION switchboard.batch_check(jsonb) IS
  'Refuses (invalid_argument) batch items that are not an array of 1 to 50 objects with a string id.';

-- An item's refusal, as refuse_todo would raise it: not_found (unknown, malformed or another
-- endpoint's todo: p_queue is NULL), forbidden (queue outside the grant), else conflict; an id
-- given again in the same batch is a conflict. Inlined by the planner.
CREATE OR REPLACE FUNCTION switchboard.batch_refusal(p_given text, p_first boolean, p_queue text, p_queues text[])
RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('id', p_given, 'ok', false,
        'code', CASE WHEN NOT p_first THEN 'conflict'
                     WHEN p_queue IS NULL THEN 'not_found'
                     WHEN NOT p_queue = ANY (p_queues) THEN 'forbidden'
                     ELSE 'conflict' END,
        'message', CASE WHEN NOT p_first THEN 'todo appears more than once in this batch'
                        WHEN p_queue IS NULL THEN 'todo not found'
                        WHEN NOT p_queue = ANY (p_queues) THEN 'todo queue is outside the granted queues'
                        ELSE 'todo is not in a state that allows this, or is held by another worker' END)
$$;
COMMENT ON FUNCTION switchboard.batch_refusal(text, boolean, text, text[]) IS
  'One refused item of a batch: {id, ok: false, code, message}, with the code refuse_todo would raise.';

CREATE OR REPLACE FUNCTION switchboard.claim_next_many(
    p_endpoint uuid, p_max int, p_queue text DEFAULT NULL, p_lease_ttl_seconds int DEFAULT NULL,
    p_require_fence boolean DEFAULT false)
RETURNS json
LANGUAGE plpgsql
-- As in claim_next: the claim walks todos_claimable in claim order, even without statistics.
-- The generic plan from the first call on (see the statement below): planning the statement
-- again on each call (PL/pgSQL's custom plans, which a LIMIT parameter keeps choosing) cost
-- more than its execution (pgbench, 10 a batch: 6-12 ms a claim+complete pair against 10-20 ms).
SET enable_sort = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queues  text[];
    v_owner   text;
    v_lease   interval;
    v_expired boolean;
    v_due     boolean;
    v_answer  json;
BEGIN
    IF p_max IS NULL OR p_max NOT BETWEEN 1 AND 50 THEN
        PERFORM switchboard.refuse('invalid_argument', 'max must be between 1 and 50');
    END IF;
    -- The grant and the takeovers, as in claim_next.
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

    -- One statement: lock up to p_max of the oldest pending rows others have not locked, claim
    -- each with its own fence token (drawn per row), and build the answer once, oldest first.
    -- The UPDATE finds its rows by id = ANY (array), not by a join with picked: a generic plan
    -- (PL/pgSQL caches one) cannot know that LIMIT p_max is small, and joined a sequential scan
    -- of todos (450 ms at 90k rows); the array is a primary-key lookup in every plan.
    -- empty: false as in claim_next's answer (the tool's output schema requires it).
    WITH picked AS (
        SELECT c.id, CASE WHEN p_require_fence THEN switchboard.new_token('sbl_') END AS token
          FROM switchboard.todos c
         WHERE c.endpoint_id = p_endpoint AND c.queue = ANY (v_queues) AND c.state = 'pending'
           AND c.attempt < c.max_attempts
         ORDER BY c.created_at, c.id
         LIMIT p_max
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE switchboard.todos u
           SET state            = 'claimed',
               owner            = v_owner,
               lease_expires_at = now() + v_lease,
               lease_token_hash = (SELECT sha256(convert_to(p.token, 'UTF8')) FROM picked p WHERE p.id = u.id),
               attempt          = u.attempt + 1,
               updated_at       = now()
         WHERE u.id = ANY (ARRAY(SELECT p.id FROM picked p))
        -- claim's answer per todo, todo_detail_json spelled out (see claim_next).
        RETURNING u.created_at, u.id,
                  switchboard.todo_json(u) || jsonb_build_object(
                      'payload', CASE WHEN u.event_id IS NULL THEN u.payload
                                      ELSE (SELECT ev.payload FROM switchboard.webhook_events ev WHERE ev.id = u.event_id) END,
                      'routing', u.routing) AS todo
    )
    SELECT json_build_object('empty', false, 'todos', json_agg(
               jsonb_strip_nulls(jsonb_build_object('lease_token', p.token)) || c.todo ORDER BY c.created_at, c.id))
      INTO v_answer
      FROM claimed c
      JOIN picked p ON p.id = c.id
    HAVING count(*) > 0;
    RETURN coalesce(v_answer, '{"todos": [], "empty": true}'::json);
END
$$;
COMMENT ON FUNCTION switchboard.claim_next_many(uuid, int, text, int, boolean) IS
  'Claim up to p_max (1-50) of the oldest claimable todos (created_at, id) in the granted queues or one granted queue, in one statement, FOR UPDATE SKIP LOCKED; each with its own lease and (fenced) its own lease_token. {"empty": false, "todos": [...]}, or {"todos": [], "empty": true} when there is none.';

-- complete, fail and release of a batch, in one statement; p_verb picks the transition, which
-- is each verb's own (complete, fail, release above), spelled once per column.
CREATE OR REPLACE FUNCTION switchboard.finish_many(p_endpoint uuid, p_verb text, p_items jsonb) RETURNS json
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- as claim_next_many: planned once per session
AS $$
DECLARE
    v_queues text[];
    v_owner  text;
    v_answer json;
    v_ring   boolean;
BEGIN
    IF p_verb IS NULL OR p_verb NOT IN ('complete', 'fail', 'release') THEN
        PERFORM switchboard.refuse('invalid_argument', 'verb must be complete, fail or release');
    END IF;
    PERFORM switchboard.batch_check(p_items);
    SELECT g.queues, g.owner INTO v_queues, v_owner FROM switchboard.scope(p_endpoint) g;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('forbidden', 'endpoint is not active');
    END IF;
    WITH items AS (
        SELECT * FROM switchboard.batch_items(p_items)
    ), moved AS (
        -- complete: done with the result. fail: a parked retry while attempts remain, else a
        -- dead letter. release: pending again, or a dead letter on the last attempt (its result
        -- is ignored).
        UPDATE switchboard.todos u
           SET state            = CASE WHEN p_verb = 'complete' THEN 'done'
                                       WHEN p_verb = 'fail' OR u.attempt >= u.max_attempts THEN 'failed'
                                       ELSE 'pending' END,
               owner            = CASE WHEN p_verb = 'release' AND u.attempt < u.max_attempts THEN NULL ELSE u.owner END,
               result           = CASE WHEN p_verb <> 'release' THEN i.result
                                       WHEN u.attempt < u.max_attempts THEN u.result
                                       ELSE '{"error": "released_without_attempts_left"}' END,
               next_retry_at    = CASE WHEN p_verb <> 'fail' THEN u.next_retry_at
                                       WHEN u.attempt < u.max_attempts THEN now() + switchboard.backoff(u.attempt) END,
               completed_at     = CASE WHEN p_verb = 'complete' OR u.attempt >= u.max_attempts THEN now() END,
               ready_at         = CASE WHEN p_verb = 'release' THEN now() ELSE u.ready_at END,
               lease_expires_at = NULL,
               lease_token_hash = NULL,
               updated_at       = now()
          FROM items i
         WHERE i.first AND u.id = i.id AND u.endpoint_id = p_endpoint
           AND switchboard.holds(u, v_queues, v_owner, i.token)
        RETURNING u.id, u.state, switchboard.todo_json(u) AS todo
    )
    SELECT json_build_object('results', json_agg(
               CASE WHEN m.id IS NOT NULL THEN jsonb_build_object('id', i.given, 'ok', true, 'todo', m.todo)
                    ELSE switchboard.batch_refusal(i.given, i.first, t.queue, v_queues) END
               ORDER BY i.ord)),
           coalesce(bool_or(m.state = 'pending'), false)
      INTO v_answer, v_ring
      FROM items i
      LEFT JOIN moved m ON i.first AND m.id = i.id
      LEFT JOIN switchboard.todos t ON m.id IS NULL AND t.id = i.id AND t.endpoint_id = p_endpoint;
    IF v_ring THEN
        PERFORM switchboard.ring(); -- a released todo is claimable again
    END IF;
    RETURN v_answer;
END
$$;
COMMENT ON FUNCTION switchboard.finish_many(uuid, text, jsonb) IS
  'complete, fail or release (p_verb) for each of 1-50 items [{id, result?, lease_token?}] in one statement, each judged on its own: {"results": [{id, ok: true, todo} | {id, ok: false, code, message}]} in the order given. Rings the doorbell when a todo went back to pending.';

-- The batch verbs by name, for the server and for psql.
CREATE OR REPLACE FUNCTION switchboard.complete_many(p_endpoint uuid, p_items jsonb) RETURNS json
LANGUAGE sql AS $$ SELECT switchboard.finish_many(p_endpoint, 'complete', p_items) $$;
COMMENT ON FUNCTION switchboard.complete_many(uuid, jsonb) IS 'finish_many with complete.';

CREATE OR REPLACE FUNCTION switchboard.fail_many(p_endpoint uuid, p_items jsonb) RETURNS json
LANGUAGE sql AS $$ SELECT switchboard.finish_many(p_endpoint, 'fail', p_items) $$;
COMMENT ON FUNCTION switchboard.fail_many(uuid, jsonb) IS 'finish_many with fail.';

CREATE OR REPLACE FUNCTION switchboard.release_many(p_endpoint uuid, p_items jsonb) RETURNS json
LANGUAGE sql AS $$ SELECT switchboard.finish_many(p_endpoint, 'release', p_items) $$;
COMMENT ON FUNCTION switchboard.release_many(uuid, jsonb) IS 'finish_many with release.';

-- Operators: dead letters back to work, and cancel.

-- Who asked: the operator CLI passes operator:<user>; from psql it is the database role.
CREATE OR REPLACE FUNCTION switchboard.actor(p_by text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(btrim(p_by), ''), 'dba:' || session_user)
$$;
COMMENT ON FUNCTION switchboard.actor(text) IS 'The recorded actor: p_by, else dba:<session role>.';

-- The redrive itself, for the dead letters among p_ids (a set the caller picked): back to pending
-- with a fresh attempt budget, recorded. A dead letter of a revoked endpoint stays, and so does
-- one whose idempotency key a live todo holds again (of several dead letters with one key, the
-- newest goes). Rings the doorbell; returns the ids moved, sorted.
CREATE OR REPLACE FUNCTION switchboard.redrive_ids(p_ids uuid[], p_by text) RETURNS uuid[]
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_by text := switchboard.actor(p_by);
BEGIN
    WITH candidates AS (
        SELECT t.id, t.endpoint_id, t.idempotency_key,
               row_number() OVER (PARTITION BY t.endpoint_id, t.idempotency_key ORDER BY t.completed_at DESC, t.id) AS nth
          FROM switchboard.todos t
          JOIN switchboard.endpoints e ON e.id = t.endpoint_id AND e.state = 'active'
         WHERE t.id = ANY (p_ids) AND t.state = 'failed' AND t.next_retry_at IS NULL
    ), picked AS (
        SELECT t.id
          FROM switchboard.todos t
          JOIN candidates c ON c.id = t.id
         WHERE (c.idempotency_key IS NULL OR c.nth = 1)
           AND NOT EXISTS (SELECT 1 FROM switchboard.todos l
                            WHERE l.endpoint_id = c.endpoint_id AND l.idempotency_key = c.idempotency_key
                              AND (l.state IN ('pending', 'claimed') OR l.next_retry_at IS NOT NULL))
           FOR UPDATE OF t SKIP LOCKED
    ), moved AS (
        UPDATE switchboard.todos u
           SET state = 'pending', attempt = 0, max_attempts = switchboard.setting('max_attempts')::int,
               owner = NULL, lease_token_hash = NULL, completed_at = NULL,
               ready_at = now(), updated_at = now(),
               redrives = u.redrives + 1, redriven_at = now(), redriven_by = v_by
          FROM picked p
         WHERE u.id = p.id AND u.state = 'failed' AND u.next_retry_at IS NULL
        RETURNING u.id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO v_ids FROM moved;
    IF cardinality(v_ids) > 0 THEN
        PERFORM switchboard.ring();
    END IF;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION switchboard.redrive_ids(uuid[], text) IS
  'The dead letters among p_ids back to pending (fresh attempt budget, recorded as p_by), skipping revoked endpoints and keys a live todo holds; rings the doorbell; the ids moved.';

-- The cancel itself, for the pending and failed todos among p_ids: cancelled (terminal), with the
-- actor and the previous result kept in result. Returns the ids cancelled, sorted.
CREATE OR REPLACE FUNCTION switchboard.cancel_ids(p_ids uuid[], p_by text) RETURNS uuid[]
LANGUAGE sql AS $$
    WITH moved AS (
        UPDATE switchboard.todos u
           SET state = 'cancelled', next_retry_at = NULL, owner = NULL, lease_token_hash = NULL,
               result = jsonb_build_object('cancelled_by', switchboard.actor(p_by), 'previous', u.result),
               completed_at = now(), updated_at = now()
         WHERE u.id = ANY (p_ids) AND u.state IN ('pending', 'failed')
        RETURNING u.id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM moved
$$;
COMMENT ON FUNCTION switchboard.cancel_ids(uuid[], text) IS
  'Cancel the pending and failed todos among p_ids (terminal; cancelled_by and the previous result kept); the ids cancelled.';

-- By id (p_todo) or by endpoint and queue (optionally only dead-lettered at or after p_since).
-- A dead letter whose idempotency key a live todo holds again is left alone (skipped).
CREATE OR REPLACE FUNCTION switchboard.redrive(
    p_todo     uuid DEFAULT NULL,
    p_endpoint uuid DEFAULT NULL,
    p_queue    text DEFAULT NULL,
    p_since    timestamptz DEFAULT NULL,
    p_by       text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_by text := switchboard.actor(p_by);
    v_state text;
BEGIN
    IF (p_todo IS NULL) = (p_endpoint IS NULL) OR (p_endpoint IS NULL) <> (p_queue IS NULL)
       OR (p_todo IS NOT NULL AND p_since IS NOT NULL) THEN
        PERFORM switchboard.refuse('invalid_argument', 'redrive takes a todo id, or an endpoint and a queue (and optionally since)');
    END IF;
    IF p_endpoint IS NOT NULL THEN
        SELECT state INTO v_state FROM switchboard.endpoints WHERE id = p_endpoint;
        IF NOT FOUND THEN
            PERFORM switchboard.refuse('not_found', 'unknown endpoint');
        ELSIF v_state <> 'active' THEN
            PERFORM switchboard.refuse('conflict', 'the endpoint is revoked: its dead letters cannot run again');
        END IF;
    END IF;

    v_ids := switchboard.redrive_ids(ARRAY(
        SELECT t.id FROM switchboard.todos t
         WHERE t.state = 'failed' AND t.next_retry_at IS NULL
           AND (p_todo IS NULL OR t.id = p_todo)
           AND (p_endpoint IS NULL OR (t.endpoint_id = p_endpoint AND t.queue = p_queue))
           AND (p_since IS NULL OR t.completed_at >= p_since)), v_by);

    IF p_todo IS NOT NULL AND cardinality(v_ids) = 0 THEN
        SELECT t.state || CASE WHEN t.next_retry_at IS NOT NULL THEN ' (a parked retry)' ELSE '' END
          INTO v_state FROM switchboard.todos t WHERE t.id = p_todo;
        IF NOT FOUND THEN
            PERFORM switchboard.refuse('not_found', 'unknown todo');
        END IF;
        PERFORM switchboard.refuse('conflict', format('the todo is %s, not a dead letter (or its endpoint is revoked, or a live todo holds its idempotency key)', v_state));
    END IF;
    RETURN jsonb_build_object('redriven', cardinality(v_ids), 'ids', to_jsonb(v_ids), 'by', v_by);
END
$$;
COMMENT ON FUNCTION switchboard.redrive(uuid, uuid, text, timestamptz, text) IS
  'Dead letters back to pending with a fresh attempt budget (max_attempts setting), recorded in redrives/redriven_at/redriven_by, ringing the doorbell. By p_todo, or by p_endpoint + p_queue (optionally p_since). Returns {redriven, ids, by}.';

CREATE OR REPLACE FUNCTION switchboard.cancel(p_todo uuid, p_by text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_by text := switchboard.actor(p_by);
    v_state text;
BEGIN
    IF cardinality(switchboard.cancel_ids(ARRAY[p_todo], v_by)) = 0 THEN
        SELECT state INTO v_state FROM switchboard.todos WHERE id = p_todo;
        IF NOT FOUND THEN
            PERFORM switchboard.refuse('not_found', 'unknown todo');
        ELSIF v_state = 'claimed' THEN
            PERFORM switchboard.refuse('conflict', 'the todo is claimed: its holder must finish or release it first');
        END IF;
        PERFORM switchboard.refuse('conflict', format('the todo is %s already', v_state));
    END IF;
    RETURN jsonb_build_object('id', p_todo, 'state', 'cancelled', 'by', v_by);
END
$$;
COMMENT ON FUNCTION switchboard.cancel(uuid, text) IS
  'An operator''s end for a pending or failed todo: state cancelled (terminal, never claimable, purged like done). A claimed todo is a conflict.';
