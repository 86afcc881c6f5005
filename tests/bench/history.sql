-- Diagnostic (issue 37, docs/benchmarks.md "Batches and the peer"), not a migration: finished
-- todos moved to a history table partitioned by finish time, as pgmq archives. Measured against
-- the schema as it is and not taken. Usable with go run ./tests/bench -sql tests/bench/history.sql.
CREATE TABLE switchboard.todos_history (LIKE switchboard.todos INCLUDING DEFAULTS)
    PARTITION BY RANGE (completed_at);
DO $$
DECLARE d date := current_date - 1;
BEGIN
    FOR i IN 0..3 LOOP
        EXECUTE format('CREATE TABLE switchboard.todos_history_%s PARTITION OF switchboard.todos_history FOR VALUES FROM (%L) TO (%L)',
                       to_char(d + i, 'YYYYMMDD'), d + i, d + i + 1);
    END LOOP;
END $$;
-- get_todo by id, list_todos newest first per endpoint; completed_at is the partition key.
CREATE INDEX todos_history_id ON switchboard.todos_history (id);
CREATE INDEX todos_history_recent ON switchboard.todos_history (endpoint_id, created_at DESC);

CREATE OR REPLACE FUNCTION switchboard.complete(
    p_endpoint uuid, p_todo uuid, p_result jsonb DEFAULT NULL, p_lease_token text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_todo jsonb;
BEGIN
    WITH d AS (
        DELETE FROM switchboard.todos u
         USING switchboard.scope(p_endpoint) g
         WHERE u.id = p_todo AND u.endpoint_id = p_endpoint
           AND switchboard.holds(u, g.queues, g.owner, p_lease_token)
        RETURNING u.*
    ), h AS (
        INSERT INTO switchboard.todos_history
        SELECT d.id, d.endpoint_id, d.queue, d.title, d.source, d.kind, d.payload, d.payload_size, d.routing,
               d.event_id, 'done', d.owner, NULL, NULL, d.attempt, d.max_attempts, NULL, p_result,
               d.idempotency_key, d.created_at, d.ready_at, now(), now(), d.redrives, d.redriven_at, d.redriven_by
          FROM d
        RETURNING *
    )
    SELECT switchboard.todo_json(ROW(h.*)::switchboard.todos) INTO v_todo FROM h;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse_todo(p_endpoint, p_todo);
    END IF;
    RETURN v_todo;
END
$$;

CREATE OR REPLACE FUNCTION switchboard.complete_many(p_endpoint uuid, p_items jsonb) RETURNS json
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_queues text[];
    v_owner  text;
    v_answer json;
BEGIN
    PERFORM switchboard.batch_check(p_items);
    SELECT g.queues, g.owner INTO v_queues, v_owner FROM switchboard.scope(p_endpoint) g;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('forbidden', 'endpoint is not active');
    END IF;
    WITH items AS (
        SELECT * FROM switchboard.batch_items(p_items)
    ), d AS (
        DELETE FROM switchboard.todos u
         USING items i
         WHERE i.first AND u.id = i.id AND u.endpoint_id = p_endpoint
           AND switchboard.holds(u, v_queues, v_owner, i.token)
        RETURNING u.*, i.result AS new_result
    ), moved AS (
        INSERT INTO switchboard.todos_history
        SELECT d.id, d.endpoint_id, d.queue, d.title, d.source, d.kind, d.payload, d.payload_size, d.routing,
               d.event_id, 'done', d.owner, NULL, NULL, d.attempt, d.max_attempts, NULL, d.new_result,
               d.idempotency_key, d.created_at, d.ready_at, now(), now(), d.redrives, d.redriven_at, d.redriven_by
          FROM d
        RETURNING id, switchboard.todo_json(ROW(todos_history.*)::switchboard.todos) AS todo
    )
    SELECT json_build_object('results', json_agg(
               CASE WHEN m.id IS NOT NULL THEN jsonb_build_object('id', i.given, 'ok', true, 'todo', m.todo)
                    ELSE switchboard.batch_refusal(i.given, i.first, t.queue, v_queues) END
               ORDER BY i.ord))
      INTO v_answer
      FROM items i
      LEFT JOIN moved m ON i.first AND m.id = i.id
      LEFT JOIN switchboard.todos t ON m.id IS NULL AND t.id = i.id AND t.endpoint_id = p_endpoint;
    RETURN v_answer;
END
$$;
ALTER FUNCTION switchboard.complete(uuid, uuid, jsonb, text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION switchboard.complete_many(uuid, jsonb) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
