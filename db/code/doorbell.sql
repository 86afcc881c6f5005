-- The doorbell: how new work rings a waiting agent.
--
-- Functions that make a todo ready (create_todo, release, requeue_expired, release_retries)
-- call ring(); MCP servers LISTEN on switchboard_doorbell and, when it rings, read what became
-- ready with ready_todos_since() (and oldest_pending() when a session attaches). What time makes
-- claimable (an expired lease, an elapsed retry window) commits nothing and rings nothing: the
-- servers read it with due_todos() at the moment next_due() named. claimable_todos() checks the
-- todos a server is about to ring again (ring_again_seconds).

-- Doorbell signal, coalesced. NOTIFY takes a database-wide lock at commit that serializes
-- committing transactions, so a busy database must not notify in every transaction: only the
-- first transaction per window (doorbell_window_ms) that gets the doorbell row without waiting
-- sends one, with payload '*' ("work became ready"). Others skip. Listeners then re-read the
-- ready todos of every endpoint they serve, at once and once more after the window (trailing
-- re-check), which picks up the todos whose signal was coalesced, and a last time half a second
-- later, for a transaction that rang inside the window but committed after the re-check.
-- Coalescing per database, not per endpoint, bounds the NOTIFY rate however many endpoints are
-- busy.
-- Inside a window a ring is one read: the settings and the row's time in one statement, no
-- lock and no write, so ringing transactions share nothing but that read (the UPDATE with its
-- SKIP LOCKED subquery ran in every one of them before). Only a ring that finds the window
-- over tries the row, once per window.
-- Best effort: no todo depends on a signal to be claimable.
CREATE OR REPLACE FUNCTION switchboard.ring() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_enabled boolean;
    v_since   timestamptz;
BEGIN
    SELECT s.enabled, clock_timestamp() - make_interval(secs => s.window_ms / 1000.0)
      INTO v_enabled, v_since
      FROM (SELECT max(value) FILTER (WHERE key = 'doorbell_enabled') = 1 AS enabled,
                   max(value) FILTER (WHERE key = 'doorbell_window_ms') AS window_ms
              FROM switchboard.settings
             WHERE key IN ('doorbell_enabled', 'doorbell_window_ms')) s
     WHERE EXISTS (SELECT 1 FROM switchboard.doorbell d WHERE d.signalled_at < clock_timestamp()
                                                             - make_interval(secs => s.window_ms / 1000.0));
    IF NOT FOUND OR NOT v_enabled THEN
        RETURN false; -- inside the window (or off)
    END IF;
    UPDATE switchboard.doorbell d
       SET signalled_at = clock_timestamp()
     WHERE d.one = (SELECT b.one
                      FROM switchboard.doorbell b
                     WHERE b.signalled_at < v_since
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

-- Doorbell reads. Only todos the endpoint could claim (granted queues) ring it. PL/pgSQL for
-- the reason endpoint_resolve is (identity.sql). They return the attempt too: a todo that a
-- time-based ring announced (due_todos) and that a claim's takeover or the reaper then requeues
-- keeps its attempt, so the doorbell does not ring it a second time; a claim in between raises it.

-- What became ready across endpoints: one walk of todos_ready (ready_at, endpoint_id) from
-- p_since, so a doorbell read costs the todos that became ready since, not the endpoints that
-- have sessions. The server keeps the rows of its own endpoints; for one endpoint in psql, add
-- WHERE endpoint_id = '<uuid>'.
CREATE OR REPLACE FUNCTION switchboard.ready_todos_since(p_since timestamptz, p_limit int DEFAULT 256)
RETURNS TABLE (endpoint_id uuid, id uuid, queue text, title text, source text, kind text, ready_at timestamptz,
               attempt int)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT t.endpoint_id, t.id, t.queue::text, t.title, t.source, t.kind, t.ready_at, t.attempt
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.state = 'pending' AND t.ready_at >= p_since AND t.queue = ANY (e.queues)
     ORDER BY t.ready_at
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION switchboard.ready_todos_since(timestamptz, int) IS
  'Doorbell: pending todos of every endpoint (granted queues) that became ready at or after p_since, oldest first; one walk of todos_ready.';

CREATE OR REPLACE FUNCTION switchboard.oldest_pending(p_endpoint uuid, p_limit int DEFAULT 3)
RETURNS TABLE (id uuid, queue text, title text, source text, kind text, ready_at timestamptz, attempt int)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT t.id, t.queue::text, t.title, t.source, t.kind, t.ready_at, t.attempt
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.endpoint_id = p_endpoint AND t.state = 'pending' AND t.queue = ANY (e.queues)
     ORDER BY t.created_at, t.id
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION switchboard.oldest_pending(uuid, int) IS
  'Doorbell on attach: the oldest pending todos of an endpoint in its granted queues.';

-- Time-based rings. A claimed todo whose lease expired, or a failed one whose retry window
-- elapsed, is claimable at once (claim_next takes it over) but nothing notifies: no transaction
-- commits at that moment. The doorbell asks next_due for the earliest such moment still to
-- come, arms one timer, and at that moment reads due_todos. Both walk the partial indexes of
-- in-flight rows (todos_leases, todos_retries), not the backlog.
CREATE OR REPLACE FUNCTION switchboard.due_todos(p_endpoints uuid[], p_since timestamptz, p_limit int DEFAULT 64)
RETURNS TABLE (endpoint_id uuid, id uuid, queue text, title text, source text, kind text,
               due_at timestamptz, attempt int)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT d.endpoint_id, d.id, d.queue::text, d.title, d.source, d.kind, d.due_at, d.attempt
      FROM (SELECT t.endpoint_id, t.id, t.queue, t.title, t.source, t.kind, t.lease_expires_at AS due_at,
                   t.attempt
              FROM switchboard.todos t
             WHERE t.state = 'claimed' AND t.lease_expires_at >= p_since AND t.lease_expires_at <= now()
               AND t.attempt < t.max_attempts AND t.endpoint_id = ANY (p_endpoints)
            UNION ALL
            SELECT t.endpoint_id, t.id, t.queue, t.title, t.source, t.kind, t.next_retry_at, t.attempt
              FROM switchboard.todos t
             WHERE t.next_retry_at >= p_since AND t.next_retry_at <= now()
               AND t.endpoint_id = ANY (p_endpoints)) d
      JOIN switchboard.endpoints e ON e.id = d.endpoint_id
     WHERE d.queue = ANY (e.queues)
     ORDER BY d.due_at
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION switchboard.due_todos(uuid[], timestamptz, int) IS
  'Doorbell: todos of these endpoints (granted queues) that time made claimable in [p_since, now()]: expired leases with an attempt left, elapsed retry windows. Oldest first; due_at is the moment.';

-- p_within bounds the look-ahead: the doorbell reads again every few seconds anyway, so it asks
-- only for moments before its next read. Unbounded, the min() walked todos_leases from now()
-- through the entries of every lease claimed in the last lease period and since completed
-- (their row versions dead but not yet vacuumed): in a steady drain, thousands of heap visits,
-- 11-40 ms a read (docs/benchmarks.md, "The two misses, measured").
CREATE OR REPLACE FUNCTION switchboard.next_due(p_endpoints uuid[], p_within interval DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_until timestamptz := coalesce(now() + p_within, 'infinity');
BEGIN
    RETURN least(
        (SELECT min(t.lease_expires_at) FROM switchboard.todos t
          WHERE t.state = 'claimed' AND t.lease_expires_at > now() AND t.lease_expires_at <= v_until
            AND t.endpoint_id = ANY (p_endpoints)),
        (SELECT min(t.next_retry_at) FROM switchboard.todos t
          WHERE t.next_retry_at > now() AND t.next_retry_at <= v_until AND t.endpoint_id = ANY (p_endpoints)));
END
$$;
COMMENT ON FUNCTION switchboard.next_due(uuid[], interval) IS
  'Doorbell: the earliest moment still to come (within p_within, when given) at which a lease of these endpoints expires or a retry window elapses (NULL: none).';

-- Ring again: which of these todos can a claim take now (pending, expired lease or elapsed retry
-- with an attempt left, in a granted queue of an active endpoint).
CREATE OR REPLACE FUNCTION switchboard.claimable_todos(p_ids uuid[]) RETURNS SETOF uuid
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT t.id
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.id = ANY (p_ids) AND e.state = 'active' AND t.queue = ANY (e.queues)
       AND ((t.state = 'pending' AND t.attempt < t.max_attempts)
            OR (t.state = 'claimed' AND t.lease_expires_at < now() AND t.attempt < t.max_attempts)
            OR t.next_retry_at <= now());
END
$$;
COMMENT ON FUNCTION switchboard.claimable_todos(uuid[]) IS
  'Doorbell ring-again: the ids among p_ids that a claim could take now.';
