-- The console's queues and todos (issue 36): what a signed-in human sees and does from the
-- browser. Every function takes the human and whether they are an operator, and reaches only
-- the todos of that human's endpoints (an operator's: every endpoint's). Another human's todo, a
-- malformed id and an unknown id are one identical not_found. server/console calls them through
-- server/store as switchboard_runtime; the actor of a redrive or cancel is p_by (human:<name>).

-- The endpoints a human sees: their agents', or every one for an operator. Inlined.
CREATE OR REPLACE FUNCTION switchboard.console_endpoints(p_human uuid, p_operator boolean)
RETURNS TABLE (id uuid, slug text, state text, queues text[], agent text, human text)
LANGUAGE sql STABLE AS $$
    SELECT e.id, e.slug, e.state, e.queues, a.name, h.name
      FROM switchboard.endpoints e
      JOIN switchboard.agents a ON a.id = e.agent_id
      JOIN switchboard.humans h ON h.id = a.owner_human_id
     WHERE coalesce(p_operator, false) OR a.owner_human_id = p_human
$$;
COMMENT ON FUNCTION switchboard.console_endpoints(uuid, boolean) IS
  'Row source (inlined): the endpoints a console human sees (their own agents'', or all for an operator).';

-- The state a person reads: a failed todo is waiting for a retry or a dead letter.
CREATE OR REPLACE FUNCTION switchboard.console_state(t switchboard.todos) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN t.state <> 'failed' THEN t.state
                WHEN t.next_retry_at IS NULL THEN 'dead_letter'
                ELSE 'retry_wait' END
$$;
COMMENT ON FUNCTION switchboard.console_state(switchboard.todos) IS
  'pending, claimed, retry_wait (a parked retry), dead_letter, done or cancelled.';

-- The predicate of a console state on switchboard.todos t, each one the predicate of a partial
-- index (todos_claimable, todos_leases, todos_retries, todos_dead), so a list or a count of the
-- live states never walks the finished history. Fixed texts only: never the caller's input.
CREATE OR REPLACE FUNCTION switchboard.console_state_sql(p_state text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN CASE p_state
        WHEN 'pending'     THEN $q$t.state = 'pending'$q$
        WHEN 'claimed'     THEN $q$t.lease_expires_at IS NOT NULL$q$
        WHEN 'retry_wait'  THEN $q$t.next_retry_at IS NOT NULL$q$
        WHEN 'dead_letter' THEN $q$t.state = 'failed' AND t.next_retry_at IS NULL$q$
        WHEN 'done'        THEN $q$t.state = 'done'$q$
        WHEN 'cancelled'   THEN $q$t.state = 'cancelled'$q$
        WHEN 'any'         THEN 'true'
    END;
END
$$;
COMMENT ON FUNCTION switchboard.console_state_sql(text) IS
  'SQL predicate on todos t for a console state (or any); NULL for an unknown state.';

-- The filter of the todo list and of the bulk actions, checked: invalid_argument for a state
-- outside the list or a queue that is not a queue name.
CREATE OR REPLACE FUNCTION switchboard.console_check_filter(p_queue text, p_state text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_state IS NOT NULL AND switchboard.console_state_sql(p_state) IS NULL OR p_state = 'any' THEN
        PERFORM switchboard.refuse('invalid_argument',
            'state must be one of pending, claimed, retry_wait, dead_letter, done, cancelled');
    END IF;
    IF p_queue IS NOT NULL AND p_queue !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$' THEN
        PERFORM switchboard.refuse('invalid_argument', 'queue name is invalid');
    END IF;
END
$$;
COMMENT ON FUNCTION switchboard.console_check_filter(text, text) IS
  'invalid_argument for an unknown console state or a malformed queue name.';

-- A title search as a LIKE pattern: the text is matched literally.
CREATE OR REPLACE FUNCTION switchboard.console_like(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT '%' || replace(replace(replace(p_text, '\', '\\'), '%', '\%'), '_', '\_') || '%'
     WHERE nullif(btrim(p_text), '') IS NOT NULL
$$;
COMMENT ON FUNCTION switchboard.console_like(text) IS 'ILIKE pattern matching p_text anywhere, literally; NULL for a blank text.';

-- A todo in a console list: the MCP shape plus its endpoint and the state a person reads.
CREATE OR REPLACE FUNCTION switchboard.console_todo_json(t switchboard.todos, p_slug text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT switchboard.todo_json(t) || jsonb_build_object(
        'endpoint_id', t.endpoint_id,
        'endpoint', p_slug,
        'view_state', switchboard.console_state(t),
        'updated_at', switchboard.rfc3339(t.updated_at),
        'completed_at', switchboard.rfc3339(t.completed_at))
$$;
COMMENT ON FUNCTION switchboard.console_todo_json(switchboard.todos, text) IS
  'A todo as the console lists it: todo_json plus endpoint, view_state, updated_at, completed_at.';

-- Per queue of each endpoint the human sees: the live counts by state (from the partial indexes
-- of the live states), the age of the oldest pending todo, and the last day's finished counts
-- from the rollup (todo_minutes). Never a count over the finished history.
CREATE OR REPLACE FUNCTION switchboard.console_queues(p_human uuid, p_operator boolean) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_eps uuid[];
    v_out jsonb;
BEGIN
    v_eps := ARRAY(SELECT e.id FROM switchboard.console_endpoints(p_human, p_operator) e);
    WITH live AS (
        SELECT t.endpoint_id, t.queue, count(*) AS pending, 0::bigint AS claimed, 0::bigint AS retry_wait,
               0::bigint AS dead_letter, min(t.created_at) AS oldest
          FROM switchboard.todos t WHERE t.state = 'pending' AND t.endpoint_id = ANY (v_eps) GROUP BY 1, 2
        UNION ALL
        SELECT t.endpoint_id, t.queue, 0, count(*), 0, 0, NULL
          FROM switchboard.todos t WHERE t.lease_expires_at IS NOT NULL AND t.endpoint_id = ANY (v_eps) GROUP BY 1, 2
        UNION ALL
        SELECT t.endpoint_id, t.queue, 0, 0, count(*), 0, NULL
          FROM switchboard.todos t WHERE t.next_retry_at IS NOT NULL AND t.endpoint_id = ANY (v_eps) GROUP BY 1, 2
        UNION ALL
        SELECT t.endpoint_id, t.queue, 0, 0, 0, count(*), NULL
          FROM switchboard.todos t
         WHERE t.state = 'failed' AND t.next_retry_at IS NULL AND t.endpoint_id = ANY (v_eps) GROUP BY 1, 2
    ), day AS (
        SELECT m.endpoint_id, m.queue, sum(m.done) AS done, sum(m.failed) AS failed, sum(m.dead) AS dead,
               sum(m.cancelled) AS cancelled
          FROM switchboard.todo_minutes m
         WHERE m.endpoint_id = ANY (v_eps) AND m.minute >= now() - interval '24 hours'
         GROUP BY 1, 2
    ), keys AS (
        SELECT e.id AS endpoint_id, q.queue
          FROM switchboard.endpoints e, unnest(e.queues) AS q (queue)
         WHERE e.id = ANY (v_eps)
        UNION
        SELECT endpoint_id, queue FROM live
        UNION
        SELECT endpoint_id, queue FROM day
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'endpoint_id', e.id, 'endpoint', e.slug, 'endpoint_state', e.state, 'agent', e.agent,
               'human', e.human, 'queue', k.queue,
               'pending', coalesce(l.pending, 0), 'claimed', coalesce(l.claimed, 0),
               'retry_wait', coalesce(l.retry_wait, 0), 'dead_letter', coalesce(l.dead_letter, 0),
               'oldest_pending_seconds', floor(extract(epoch FROM now() - l.oldest)),
               'done_24h', coalesce(d.done, 0), 'failed_24h', coalesce(d.failed, 0),
               'dead_24h', coalesce(d.dead, 0), 'cancelled_24h', coalesce(d.cancelled, 0))
               ORDER BY e.human, e.agent, e.slug, k.queue), '[]')
      INTO v_out
      FROM keys k
      JOIN switchboard.console_endpoints(p_human, p_operator) e ON e.id = k.endpoint_id
      LEFT JOIN (SELECT endpoint_id, queue, sum(pending) AS pending, sum(claimed) AS claimed,
                        sum(retry_wait) AS retry_wait, sum(dead_letter) AS dead_letter, min(oldest) AS oldest
                   FROM live GROUP BY 1, 2) l ON l.endpoint_id = k.endpoint_id AND l.queue = k.queue
      LEFT JOIN day d ON d.endpoint_id = k.endpoint_id AND d.queue = k.queue;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION switchboard.console_queues(uuid, boolean) IS
  'Per endpoint and queue the human sees: pending, claimed, retry_wait, dead_letter counts, oldest_pending_seconds, and the last 24 hours of done/failed/dead/cancelled from the rollup.';

-- The todo list: newest first, filtered by queue, console state, title text (among the newest
-- 10,000 todos of each endpoint) and endpoint, a page at a time (keyset on created_at, id: p_before_at/p_before_id is the last row of the previous
-- page). Each endpoint's newest matching rows come from its own index walk (todos_recent, or the
-- partial index of the state), so a page costs the page, not the history. The statement is
-- planned for the filter given (EXECUTE), so each state uses its partial index.
CREATE OR REPLACE FUNCTION switchboard.console_todos(
    p_human uuid, p_operator boolean, p_queue text DEFAULT NULL, p_state text DEFAULT NULL,
    p_text text DEFAULT NULL, p_endpoint text DEFAULT NULL,
    p_before_at timestamptz DEFAULT NULL, p_before_id uuid DEFAULT NULL, p_limit int DEFAULT 50)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_limit int := greatest(1, least(coalesce(p_limit, 50), 200));
    v_rows jsonb;
    v_n int;
BEGIN
    PERFORM switchboard.console_check_filter(p_queue, p_state);
    IF (p_before_at IS NULL) <> (p_before_id IS NULL) THEN
        PERFORM switchboard.refuse('invalid_argument', 'a page starts after a time and an id, both or neither');
    END IF;
    EXECUTE format($sql$
        SELECT coalesce(jsonb_agg(x.j ORDER BY x.created_at DESC, x.id DESC), '[]'), count(*)
          FROM (SELECT t.created_at, t.id, switchboard.console_todo_json(t, e.slug) AS j
                  FROM switchboard.console_endpoints($1, $2) e
                 CROSS JOIN LATERAL (
                       SELECT * FROM (
                              SELECT * FROM switchboard.todos t
                               WHERE t.endpoint_id = e.id AND %s
                                 AND ($3::text IS NULL OR t.queue = $3)
                                 AND ($5::timestamptz IS NULL OR (t.created_at <= $5 AND (t.created_at, t.id) < ($5, $6)))
                               ORDER BY t.created_at DESC, t.id DESC
                               LIMIT $9) t
                        WHERE $4::text IS NULL OR t.title ILIKE $4
                        ORDER BY t.created_at DESC, t.id DESC
                        LIMIT $7) t
                 WHERE ($8::uuid IS NULL OR e.id = $8)
                 ORDER BY t.created_at DESC, t.id DESC
                 LIMIT $7) x
        $sql$, switchboard.console_state_sql(coalesce(p_state, 'any')))
      INTO v_rows, v_n
      USING p_human, p_operator, p_queue, switchboard.console_like(p_text), p_before_at, p_before_id,
            v_limit + 1, switchboard.as_uuid(p_endpoint),
            -- A title search reads at most the newest 10,000 todos of each endpoint (after the
            -- other filters): no index serves a substring, and an unbounded search walked a
            -- million rows (0.8 s). Narrow by state or queue, or page on, to search older ones.
            CASE WHEN switchboard.console_like(p_text) IS NOT NULL THEN 10000 END;
    -- One row more than a page says whether there is a next one.
    IF v_n > v_limit THEN
        v_rows := v_rows - v_limit;
        RETURN jsonb_build_object('todos', v_rows, 'next', jsonb_build_object(
            'at', v_rows -> (v_limit - 1) ->> 'created_at', 'id', v_rows -> (v_limit - 1) ->> 'id'));
    END IF;
    RETURN jsonb_build_object('todos', v_rows, 'next', NULL);
END
$$;
COMMENT ON FUNCTION switchboard.console_todos(uuid, boolean, text, text, text, text, timestamptz, uuid, int) IS
  'Newest-first todos of the human''s endpoints, filtered by queue, state, title text and endpoint; keyset pages (next: {at, id} or null); limit 1-200.';

-- One todo with everything a person asks about it: payload, attempts, lease holder and expiry,
-- result or error, redrives, and the delivery that made it.
CREATE OR REPLACE FUNCTION switchboard.console_todo(p_human uuid, p_operator boolean, p_todo text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_out jsonb;
BEGIN
    SELECT switchboard.console_todo_json(t, e.slug) || switchboard.todo_detail_json(t) || jsonb_build_object(
               'result', t.result, 'agent', e.agent, 'human', e.human,
               'redrives', t.redrives, 'redriven_at', switchboard.rfc3339(t.redriven_at),
               'redriven_by', t.redriven_by, 'idempotency_key', t.idempotency_key,
               'ready_at', switchboard.rfc3339(t.ready_at),
               'delivery', (SELECT jsonb_build_object(
                                'id', ev.id, 'webhook_id', ev.webhook_id, 'source', ev.source,
                                'event_type', ev.event_type, 'received_at', switchboard.rfc3339(ev.received_at),
                                'disposition', ev.disposition,
                                -- The log of a webhook another human owns is theirs to read.
                                'visible', EXISTS (SELECT 1 FROM switchboard.webhooks w
                                                     JOIN switchboard.console_endpoints(p_human, p_operator) we
                                                       ON we.id = w.endpoint_id
                                                    WHERE w.id = ev.webhook_id))
                              FROM switchboard.webhook_events ev WHERE ev.id = t.event_id))
      INTO v_out
      FROM switchboard.todos t
      JOIN switchboard.console_endpoints(p_human, p_operator) e ON e.id = t.endpoint_id
     WHERE t.id = switchboard.as_uuid(p_todo);
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'todo not found');
    END IF;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION switchboard.console_todo(uuid, boolean, text) IS
  'One todo of the human''s endpoints with payload, result, lease, redrives and its delivery; one not_found for unknown, malformed and foreign ids.';

-- The todos a bulk action takes: the selected ids (p_ids, when given) or every todo matching the
-- filter, among the human's endpoints, in the states the action applies to (redrive: dead
-- letters; cancel: pending, retry_wait and dead letters). Ids the human cannot see, malformed or
-- unknown, take nothing.
CREATE OR REPLACE FUNCTION switchboard.console_targets(
    p_human uuid, p_operator boolean, p_action text, p_ids text[],
    p_queue text, p_state text, p_text text, p_endpoint text)
RETURNS SETOF uuid
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_action text := CASE p_action WHEN 'redrive' THEN switchboard.console_state_sql('dead_letter')
                                   WHEN 'cancel' THEN $q$t.state IN ('pending', 'failed')$q$ END;
BEGIN
    IF v_action IS NULL THEN
        PERFORM switchboard.refuse('invalid_argument', 'action must be redrive or cancel');
    END IF;
    IF p_ids IS NOT NULL THEN
        RETURN QUERY EXECUTE format($sql$
            SELECT t.id FROM switchboard.todos t
              JOIN switchboard.console_endpoints($1, $2) e ON e.id = t.endpoint_id
             WHERE t.id = ANY ($3) AND %s $sql$, v_action)
          USING p_human, p_operator, ARRAY(SELECT switchboard.as_uuid(i) FROM unnest(p_ids) i);
        RETURN;
    END IF;
    PERFORM switchboard.console_check_filter(p_queue, p_state);
    RETURN QUERY EXECUTE format($sql$
        SELECT t.id FROM switchboard.console_endpoints($1, $2) e
          JOIN switchboard.todos t ON t.endpoint_id = e.id
         WHERE %s AND %s
           AND ($3::text IS NULL OR t.queue = $3)
           AND ($4::text IS NULL OR t.title ILIKE $4)
           AND ($5::uuid IS NULL OR e.id = $5) $sql$,
        v_action, switchboard.console_state_sql(coalesce(p_state, 'any')))
      USING p_human, p_operator, p_queue, switchboard.console_like(p_text), switchboard.as_uuid(p_endpoint);
END
$$;
COMMENT ON FUNCTION switchboard.console_targets(uuid, boolean, text, text[], text, text, text, text) IS
  'Ids a console bulk action (redrive or cancel) would take: the selected ids or all matching the filter, within the human''s endpoints and the action''s states.';

-- How many todos a bulk action would take now: the count shown before the human confirms.
CREATE OR REPLACE FUNCTION switchboard.console_action_count(
    p_human uuid, p_operator boolean, p_action text, p_ids text[],
    p_queue text DEFAULT NULL, p_state text DEFAULT NULL, p_text text DEFAULT NULL, p_endpoint text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM switchboard.console_targets(p_human, p_operator, p_action, p_ids,
                                                     p_queue, p_state, p_text, p_endpoint)
$$;
COMMENT ON FUNCTION switchboard.console_action_count(uuid, boolean, text, text[], text, text, text, text) IS
  'The number of todos console_act would redrive or cancel with these arguments now.';

-- A bulk redrive or cancel, in one statement: the selected ids or all matching the filter. A
-- redrive follows switchboard.redrive's rules (a dead letter whose key a live todo holds again
-- stays), a cancel switchboard.cancel's (a todo claimed since is left alone). Answers
-- {action, count, ids} (ids only for a selection).
CREATE OR REPLACE FUNCTION switchboard.console_act(
    p_human uuid, p_operator boolean, p_by text, p_action text, p_ids text[],
    p_queue text DEFAULT NULL, p_state text DEFAULT NULL, p_text text DEFAULT NULL, p_endpoint text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_targets uuid[];
    v_done uuid[];
BEGIN
    v_targets := ARRAY(SELECT switchboard.console_targets(p_human, p_operator, p_action, p_ids,
                                                          p_queue, p_state, p_text, p_endpoint));
    IF p_action = 'redrive' THEN
        v_done := switchboard.redrive_ids(v_targets, p_by);
    ELSE
        v_done := switchboard.cancel_ids(v_targets, p_by);
    END IF;
    RETURN jsonb_build_object('action', p_action, 'count', cardinality(v_done))
        || CASE WHEN p_ids IS NOT NULL THEN jsonb_build_object('ids', to_jsonb(v_done)) ELSE '{}' END;
END
$$;
COMMENT ON FUNCTION switchboard.console_act(uuid, boolean, text, text, text[], text, text, text, text) IS
  'Redrive or cancel the selected todos or all matching a filter among the human''s, in one call; {action, count, ids?}.';

-- One todo: not_found unless the human sees it, then switchboard.redrive or cancel (whose
-- conflict says why a todo in another state is left alone).
CREATE OR REPLACE FUNCTION switchboard.console_todo_act(
    p_human uuid, p_operator boolean, p_by text, p_action text, p_todo text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    SELECT t.id INTO v_id
      FROM switchboard.todos t
      JOIN switchboard.console_endpoints(p_human, p_operator) e ON e.id = t.endpoint_id
     WHERE t.id = switchboard.as_uuid(p_todo);
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'todo not found');
    END IF;
    IF p_action = 'redrive' THEN
        RETURN switchboard.redrive(p_todo => v_id, p_by => p_by);
    ELSIF p_action = 'cancel' THEN
        RETURN switchboard.cancel(v_id, p_by);
    END IF;
    PERFORM switchboard.refuse('invalid_argument', 'action must be redrive or cancel');
    RETURN NULL; -- not reached: refuse raises
END
$$;
COMMENT ON FUNCTION switchboard.console_todo_act(uuid, boolean, text, text, text) IS
  'Redrive or cancel one todo the human sees (not_found otherwise); conflict when its state does not allow it.';

-- Push a todo into a queue of one of the human's endpoints (create_todo, source console).
CREATE OR REPLACE FUNCTION switchboard.console_push(
    p_human uuid, p_operator boolean, p_endpoint text, p_queue text, p_title text, p_payload jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_queues text[];
    v_id uuid;
    v_created boolean;
BEGIN
    SELECT e.queues INTO v_queues
      FROM switchboard.console_endpoints(p_human, p_operator) e
     WHERE e.id = switchboard.as_uuid(p_endpoint);
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'endpoint not found');
    END IF;
    IF p_queue IS NULL OR NOT p_queue = ANY (v_queues) THEN
        PERFORM switchboard.refuse('invalid_argument', 'queue is not one of the endpoint''s queues');
    END IF;
    IF coalesce(btrim(p_title), '') = '' OR length(p_title) > 500 THEN
        PERFORM switchboard.refuse('invalid_argument', 'title must be 1 to 500 characters');
    END IF;
    SELECT c.todo_id, c.created INTO v_id, v_created
      FROM switchboard.create_todo(switchboard.as_uuid(p_endpoint), p_queue, p_title, p_payload,
                                   p_source => 'console') c;
    RETURN jsonb_build_object('id', v_id, 'created', v_created);
END
$$;
COMMENT ON FUNCTION switchboard.console_push(uuid, boolean, text, text, text, jsonb) IS
  'Push a pending todo into a granted queue of an endpoint the human sees (not_found otherwise); invalid_argument for a queue outside it or a blank title.';

-- ---------------------------------------------------------------------------------------------
-- The home chart: finished todos per minute (last hour) and per hour (last day)
-- ---------------------------------------------------------------------------------------------

-- Count what finished since the watermark into todo_minutes, one window of at most an hour per
-- call (more: call again). It reads only the partial indexes of finished (todos_finished), dead
-- (todos_dead) and parked (todos_retries) todos past the watermark, and writes nothing the queue
-- verbs touch: claim, complete and fail pay nothing for it. A finished todo's time
-- (completed_at, or updated_at for a failed attempt) is its transaction's start, so a
-- transaction still open may yet commit a time older than now(): the window stops just before
-- the oldest open transaction of this database (one open more than five minutes is not waited
-- for). A failed attempt is counted while it waits for its retry: one retried before a run saw it
-- is not counted. One rollup runs at a time (the servers' loops and pg_cron may all call it).
CREATE OR REPLACE FUNCTION switchboard.console_rollup(OUT counted bigint, OUT through timestamptz, OUT more boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_from timestamptz;
    v_horizon timestamptz;
BEGIN
    counted := 0;
    more := false;
    SELECT m.through INTO v_from FROM switchboard.todo_rollup_mark m;
    through := v_from;
    IF NOT pg_try_advisory_xact_lock(hashtext('switchboard.console_rollup')) THEN
        RETURN;
    END IF;
    SELECT least(now(), greatest(coalesce(min(a.xact_start), now()), now() - interval '5 minutes') - interval '1 microsecond')
      INTO v_horizon
      FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL;
    through := least(v_horizon, v_from + interval '1 hour');
    IF through <= v_from THEN
        through := v_from;
        RETURN;
    END IF;
    more := through < v_horizon;

    WITH finished AS (
        SELECT t.endpoint_id, t.queue, date_trunc('minute', t.completed_at) AS minute,
               count(*) FILTER (WHERE t.state = 'done') AS done, 0::bigint AS failed, 0::bigint AS dead,
               count(*) FILTER (WHERE t.state = 'cancelled') AS cancelled
          FROM switchboard.todos t
         WHERE t.state IN ('done', 'cancelled') AND t.completed_at > v_from AND t.completed_at <= through
         GROUP BY 1, 2, 3
        UNION ALL
        SELECT t.endpoint_id, t.queue, date_trunc('minute', t.completed_at), 0, 0, count(*), 0
          FROM switchboard.todos t
         WHERE t.state = 'failed' AND t.next_retry_at IS NULL AND t.completed_at > v_from AND t.completed_at <= through
         GROUP BY 1, 2, 3
        UNION ALL
        SELECT t.endpoint_id, t.queue, date_trunc('minute', t.updated_at), 0, count(*), 0, 0
          FROM switchboard.todos t
         WHERE t.next_retry_at IS NOT NULL AND t.updated_at > v_from AND t.updated_at <= through
         GROUP BY 1, 2, 3
    ), summed AS (
        SELECT f.endpoint_id, f.minute, f.queue, sum(f.done) AS done, sum(f.failed) AS failed,
               sum(f.dead) AS dead, sum(f.cancelled) AS cancelled
          FROM finished f
         GROUP BY 1, 2, 3
    ), added AS (
        -- A data-modifying WITH runs whether or not the outer query reads it.
        INSERT INTO switchboard.todo_minutes AS m (endpoint_id, minute, queue, done, failed, dead, cancelled)
        SELECT * FROM summed
        ON CONFLICT (endpoint_id, minute, queue) DO UPDATE
           SET done = m.done + excluded.done, failed = m.failed + excluded.failed,
               dead = m.dead + excluded.dead, cancelled = m.cancelled + excluded.cancelled
    )
    SELECT coalesce(sum(done + failed + dead + cancelled), 0) INTO counted FROM summed;

    UPDATE switchboard.todo_rollup_mark SET through = console_rollup.through;
    -- The chart shows a day; an hour more covers a late window.
    DELETE FROM switchboard.todo_minutes WHERE minute < now() - interval '25 hours';
END
$$;
COMMENT ON FUNCTION switchboard.console_rollup() IS
  'Maintenance: count todos finished since the watermark (done, failed attempts, dead-lettered, cancelled) into todo_minutes, at most an hour per call (more: call again); one runs at a time. Safe from several servers and pg_cron.';

-- The home chart of the human's endpoints: per minute over the last hour and per hour over the
-- last day, done, failed and dead-lettered, zeros included; through is the rollup's watermark.
CREATE OR REPLACE FUNCTION switchboard.console_chart(p_human uuid, p_operator boolean) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH eps AS (
        SELECT ARRAY(SELECT e.id FROM switchboard.console_endpoints(p_human, p_operator) e) AS ids
    ), rows AS (
        SELECT m.minute, sum(m.done) AS done, sum(m.failed) AS failed, sum(m.dead) AS dead
          FROM switchboard.todo_minutes m, eps
         WHERE m.endpoint_id = ANY (eps.ids) AND m.minute >= date_trunc('hour', now()) - interval '23 hours'
         GROUP BY 1
    )
    SELECT jsonb_build_object(
        'through', (SELECT switchboard.rfc3339(k.through) FROM switchboard.todo_rollup_mark k),
        'minutes', (SELECT jsonb_agg(jsonb_build_object('at', switchboard.rfc3339(s.at),
                                                        'done', coalesce(r.done, 0),
                                                        'failed', coalesce(r.failed, 0),
                                                        'dead', coalesce(r.dead, 0)) ORDER BY s.at)
                      FROM generate_series(date_trunc('minute', now()) - interval '59 minutes',
                                           date_trunc('minute', now()), interval '1 minute') AS s (at)
                      LEFT JOIN rows r ON r.minute = s.at),
        'hours', (SELECT jsonb_agg(jsonb_build_object('at', switchboard.rfc3339(h.at), 'done', h.done,
                                                      'failed', h.failed, 'dead', h.dead) ORDER BY h.at)
                    FROM (SELECT s.at, coalesce(sum(r.done), 0) AS done, coalesce(sum(r.failed), 0) AS failed,
                                 coalesce(sum(r.dead), 0) AS dead
                            FROM generate_series(date_trunc('hour', now()) - interval '23 hours',
                                                 date_trunc('hour', now()), interval '1 hour') AS s (at)
                            LEFT JOIN rows r ON date_trunc('hour', r.minute) = s.at
                           GROUP BY s.at) h))
$$;
COMMENT ON FUNCTION switchboard.console_chart(uuid, boolean) IS
  'The home chart: done, failed, dead per minute (60) and per hour (24) for the human''s endpoints, from todo_minutes; through: the rollup''s watermark.';
