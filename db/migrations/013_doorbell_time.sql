-- The doorbell after issues 13 (parts 3 and 4) and 18: rings that reach a working session, rings
-- when time makes a todo claimable, and claim_next calls that wait.

INSERT INTO switchboard.settings (key, value, min_value, max_value, integral, description) VALUES
    ('ring_again_seconds',     15, 1, 3600, true,
     'a todo still claimable this long after its ring went to a session that made no tool call since is rung on the next session of its endpoint'),
    ('claim_wait_max_seconds', 50, 0, 600,  true,
     'longest wait_seconds of claim_next (and of next on complete, fail, release); 0 turns waiting off');

-- ready_todos and oldest_pending also return attempt: a todo that a time-based ring announced
-- (due_todos) and that a claim's takeover or the reaper then requeues keeps its attempt, so the
-- doorbell does not ring it a second time; a claim in between raises it.
DROP FUNCTION switchboard.ready_todos(uuid, timestamptz, int);
CREATE FUNCTION switchboard.ready_todos(p_endpoint uuid, p_since timestamptz, p_limit int DEFAULT 64)
RETURNS TABLE (id uuid, queue text, title text, source text, kind text, ready_at timestamptz, attempt int)
LANGUAGE sql STABLE AS $$
    SELECT t.id, t.queue, t.title, t.source, t.kind, t.ready_at, t.attempt
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.endpoint_id = p_endpoint AND t.state = 'pending' AND t.ready_at >= p_since
       AND t.queue = ANY (e.queues)
     ORDER BY t.ready_at
     LIMIT p_limit
$$;
COMMENT ON FUNCTION switchboard.ready_todos(uuid, timestamptz, int) IS
  'Doorbell: pending todos of an endpoint (granted queues) that became ready at or after p_since, oldest first.';

DROP FUNCTION switchboard.oldest_pending(uuid, int);
CREATE FUNCTION switchboard.oldest_pending(p_endpoint uuid, p_limit int DEFAULT 3)
RETURNS TABLE (id uuid, queue text, title text, source text, kind text, ready_at timestamptz, attempt int)
LANGUAGE sql STABLE AS $$
    SELECT t.id, t.queue, t.title, t.source, t.kind, t.ready_at, t.attempt
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.endpoint_id = p_endpoint AND t.state = 'pending' AND t.queue = ANY (e.queues)
     ORDER BY t.created_at, t.id
     LIMIT p_limit
$$;
COMMENT ON FUNCTION switchboard.oldest_pending(uuid, int) IS
  'Doorbell on attach: the oldest pending todos of an endpoint in its granted queues.';

-- Time-based rings. A claimed todo whose lease expired, or a failed one whose retry window
-- elapsed, is claimable at once (claim_next takes it over) but nothing notifies: no transaction
-- commits at that moment. The doorbell asks next_due for the earliest such moment still to
-- come, arms one timer, and at that moment reads due_todos. Both walk the partial indexes of
-- in-flight rows (todos_leases, todos_retries), not the backlog.
CREATE FUNCTION switchboard.due_todos(p_endpoints uuid[], p_since timestamptz, p_limit int DEFAULT 64)
RETURNS TABLE (endpoint_id uuid, id uuid, queue text, title text, source text, kind text,
               due_at timestamptz, attempt int)
LANGUAGE sql STABLE AS $$
    SELECT d.endpoint_id, d.id, d.queue, d.title, d.source, d.kind, d.due_at, d.attempt
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
     LIMIT p_limit
$$;
COMMENT ON FUNCTION switchboard.due_todos(uuid[], timestamptz, int) IS
  'Doorbell: todos of these endpoints (granted queues) that time made claimable in [p_since, now()]: expired leases with an attempt left, elapsed retry windows. Oldest first; due_at is the moment.';

CREATE FUNCTION switchboard.next_due(p_endpoints uuid[]) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT least(
        (SELECT min(t.lease_expires_at) FROM switchboard.todos t
          WHERE t.state = 'claimed' AND t.lease_expires_at > now() AND t.endpoint_id = ANY (p_endpoints)),
        (SELECT min(t.next_retry_at) FROM switchboard.todos t
          WHERE t.next_retry_at > now() AND t.endpoint_id = ANY (p_endpoints)))
$$;
COMMENT ON FUNCTION switchboard.next_due(uuid[]) IS
  'Doorbell: the earliest moment still to come at which a lease of these endpoints expires or a retry window elapses (NULL: none).';

-- Ring again: which of these todos can a claim take now (pending, expired lease or elapsed retry
-- with an attempt left, in a granted queue of an active endpoint).
CREATE FUNCTION switchboard.claimable_todos(p_ids uuid[]) RETURNS SETOF uuid
LANGUAGE sql STABLE AS $$
    SELECT t.id
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.id = ANY (p_ids) AND e.state = 'active' AND t.queue = ANY (e.queues)
       AND ((t.state = 'pending' AND t.attempt < t.max_attempts)
            OR (t.state = 'claimed' AND t.lease_expires_at < now() AND t.attempt < t.max_attempts)
            OR t.next_retry_at <= now())
$$;
COMMENT ON FUNCTION switchboard.claimable_todos(uuid[]) IS
  'Doorbell ring-again: the ids among p_ids that a claim could take now.';
