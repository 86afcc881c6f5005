-- Queues as MCP resources (resources/list and resources/read on /mcp/{slug}).
--
-- A queue's resource is what an agent needs to decide whether to claim: how much work is
-- waiting and the oldest of it, shaped as list_todos rows. Counts cover the live states only
-- (pending, claimed, retrying failures): done and cancelled rows are history and can be
-- millions, so they are not counted on a read that a subscriber may repeat on every ring.

-- The granted queues of an active endpoint, for resources/list. forbidden when revoked.
CREATE OR REPLACE FUNCTION switchboard.queue_resources(p_endpoint uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN to_jsonb((switchboard.caller(p_endpoint)).queues);
END
$$;
COMMENT ON FUNCTION switchboard.queue_resources(uuid) IS
  'The granted queues of an active endpoint (its MCP resources), as a JSON array; forbidden when revoked.';

-- One queue's resource: counts and the oldest claimable todos (claim order: created_at, id),
-- p_limit of them (1..50, default 10). claimable counts what claim_next could take now:
-- pending rows, claimed rows whose lease expired, failed rows whose retry window elapsed.
CREATE OR REPLACE FUNCTION switchboard.queue_resource(p_endpoint uuid, p_queue text, p_limit int DEFAULT 10)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_queues text[] := (switchboard.caller(p_endpoint)).queues;
    v_counts jsonb;
    v_oldest jsonb;
BEGIN
    IF p_queue IS NULL OR NOT p_queue = ANY (v_queues) THEN
        PERFORM switchboard.refuse('not_found', 'no such queue among the granted queues');
    END IF;
    -- Live rows only, through the partial indexes of pending and in-flight work.
    SELECT jsonb_build_object(
               'pending', count(*) FILTER (WHERE t.state = 'pending'),
               'claimed', count(*) FILTER (WHERE t.state = 'claimed'),
               'retrying', count(*) FILTER (WHERE t.state = 'failed'),
               'claimable', count(*) FILTER (WHERE t.state = 'pending'
                                                OR (t.state = 'claimed' AND t.lease_expires_at < now())
                                                OR (t.state = 'failed' AND t.next_retry_at <= now())))
      INTO v_counts
      FROM switchboard.todos t
     WHERE t.endpoint_id = p_endpoint AND t.queue = p_queue
       AND (t.state IN ('pending', 'claimed') OR (t.state = 'failed' AND t.next_retry_at IS NOT NULL));
    SELECT coalesce(jsonb_agg(switchboard.todo_json(c) ORDER BY c.created_at, c.id), '[]')
      INTO v_oldest
      FROM (SELECT *
              FROM switchboard.todos t
             WHERE t.endpoint_id = p_endpoint AND t.queue = p_queue
               AND (t.state = 'pending'
                    OR (t.state = 'claimed' AND t.lease_expires_at < now())
                    OR (t.state = 'failed' AND t.next_retry_at <= now()))
             ORDER BY t.created_at, t.id
             LIMIT greatest(1, least(coalesce(p_limit, 10), 50))) c;
    RETURN jsonb_build_object('queue', p_queue, 'counts', v_counts, 'todos', v_oldest);
END
$$;
COMMENT ON FUNCTION switchboard.queue_resource(uuid, text, int) IS
  'A granted queue as an MCP resource: counts of live todos (pending, claimed, retrying, claimable) and the oldest claimable todos as list_todos rows; not_found outside the grant.';
