-- The doorbell: how new work rings a waiting agent.
--
-- Functions that make a todo ready (create_todo, release, requeue_expired, release_retries)
-- call ring(); MCP servers LISTEN on switchboard_doorbell and, when it rings, read what became
-- ready with ready_todos() (and oldest_pending() when a session attaches).

-- Doorbell signal, coalesced. NOTIFY takes a database-wide lock at commit that serializes
-- committing transactions, so a busy database must not notify in every transaction: only the
-- first transaction per window (doorbell_window_ms) that gets the doorbell row without waiting
-- sends one, with payload '*' ("work became ready"). Others skip. Listeners then re-read the
-- ready todos of every endpoint they serve, at once and once more after the window (trailing
-- re-check), which picks up the todos whose signal was coalesced. Coalescing per database, not
-- per endpoint, bounds the NOTIFY rate however many endpoints are busy.
-- Best effort: no todo depends on a signal to be claimable.
CREATE OR REPLACE FUNCTION switchboard.ring() RETURNS boolean
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

-- Doorbell reads. Only todos the endpoint could claim (granted queues) ring it. PL/pgSQL for
-- the reason endpoint_resolve is (identity.sql).
CREATE OR REPLACE FUNCTION switchboard.ready_todos(p_endpoint uuid, p_since timestamptz, p_limit int DEFAULT 64)
RETURNS TABLE (id uuid, queue text, title text, source text, kind text, ready_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT t.id, t.queue::text, t.title, t.source, t.kind, t.ready_at
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.endpoint_id = p_endpoint AND t.state = 'pending' AND t.ready_at >= p_since
       AND t.queue = ANY (e.queues)
     ORDER BY t.ready_at
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION switchboard.ready_todos(uuid, timestamptz, int) IS
  'Doorbell: pending todos of an endpoint (granted queues) that became ready at or after p_since, oldest first.';

CREATE OR REPLACE FUNCTION switchboard.oldest_pending(p_endpoint uuid, p_limit int DEFAULT 3)
RETURNS TABLE (id uuid, queue text, title text, source text, kind text, ready_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT t.id, t.queue::text, t.title, t.source, t.kind, t.ready_at
      FROM switchboard.todos t
      JOIN switchboard.endpoints e ON e.id = t.endpoint_id
     WHERE t.endpoint_id = p_endpoint AND t.state = 'pending' AND t.queue = ANY (e.queues)
     ORDER BY t.created_at, t.id
     LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION switchboard.oldest_pending(uuid, int) IS
  'Doorbell on attach: the oldest pending todos of an endpoint in its granted queues.';
