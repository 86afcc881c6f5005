-- Retention: deleting what is past the retain_* settings, in bounded batches.
--
-- The server's maintenance loop calls purge() batch after batch (each its own transaction);
-- pg_cron or a DBA CALLs purge_all(), which commits after every batch. Both are safe beside
-- each other, beside themselves and beside traffic: rows are taken with SKIP LOCKED, and only
-- terminal rows (done, cancelled, dead letters) and events no todo points to are deleted.

-- One bounded batch: at most purge_batch_size rows of each kind (done or cancelled todos past
-- retain_done_days, dead letters past retain_dead_days, events past retain_events_days that no
-- todo points to any more), in the caller's transaction. Rows another transaction holds are
-- skipped (SKIP LOCKED), so it never waits on a claim and runs beside itself. more = some kind
-- filled its batch: call again (in a new transaction) to go on. p_dry_run: count everything that
-- is past retention right now (not bounded), delete nothing.
CREATE OR REPLACE FUNCTION switchboard.purge(
    p_dry_run boolean DEFAULT false,
    OUT todos_done bigint, OUT todos_dead bigint, OUT events bigint, OUT more boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_batch int := switchboard.setting('purge_batch_size')::int;
    v_done_before timestamptz := now() - make_interval(secs => switchboard.setting('retain_done_days') * 86400);
    v_dead_before timestamptz := now() - make_interval(secs => switchboard.setting('retain_dead_days') * 86400);
    v_events_before timestamptz := now() - make_interval(secs => switchboard.setting('retain_events_days') * 86400);
    v_oauth bigint;
BEGIN
    IF p_dry_run THEN
        SELECT count(*) INTO todos_done FROM switchboard.todos
         WHERE state IN ('done', 'cancelled') AND completed_at < v_done_before;
        SELECT count(*) INTO todos_dead FROM switchboard.todos
         WHERE state = 'failed' AND next_retry_at IS NULL AND completed_at < v_dead_before;
        -- Events whose todos are all past their own retention (or gone).
        SELECT count(*) INTO events FROM switchboard.webhook_events ev
         WHERE ev.received_at < v_events_before
           AND NOT EXISTS (SELECT 1 FROM switchboard.todos t
                            WHERE t.event_id = ev.id
                              AND NOT (t.state IN ('done', 'cancelled') AND t.completed_at < v_done_before)
                              AND NOT (t.state = 'failed' AND t.next_retry_at IS NULL AND t.completed_at < v_dead_before));
        more := false;
        RETURN;
    END IF;

    WITH doomed AS (
        SELECT id FROM switchboard.todos
         WHERE state IN ('done', 'cancelled') AND completed_at < v_done_before
         ORDER BY completed_at
         LIMIT v_batch
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM switchboard.todos t USING doomed d
         WHERE t.id = d.id AND t.state IN ('done', 'cancelled')
        RETURNING 1
    )
    SELECT count(*) INTO todos_done FROM gone;

    WITH doomed AS (
        SELECT id FROM switchboard.todos
         WHERE state = 'failed' AND next_retry_at IS NULL AND completed_at < v_dead_before
         ORDER BY completed_at
         LIMIT v_batch
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM switchboard.todos t USING doomed d
         WHERE t.id = d.id AND t.state = 'failed' AND t.next_retry_at IS NULL
        RETURNING 1
    )
    SELECT count(*) INTO todos_dead FROM gone;

    -- An event goes only when no todo points to it: a kept todo keeps its event. The row lock
    -- (taken before the NOT EXISTS is evaluated) makes a todo insert that references it wait.
    WITH doomed AS (
        SELECT ev.id FROM switchboard.webhook_events ev
         WHERE ev.received_at < v_events_before
           AND NOT EXISTS (SELECT 1 FROM switchboard.todos t WHERE t.event_id = ev.id)
         ORDER BY ev.received_at
         LIMIT v_batch
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM switchboard.webhook_events ev USING doomed d
         WHERE ev.id = d.id
           AND NOT EXISTS (SELECT 1 FROM switchboard.todos t WHERE t.event_id = ev.id)
        RETURNING 1
    )
    SELECT count(*) INTO events FROM gone;

    -- OAuth codes, tokens, registrations and grants past their time (db/code/oauth.sql).
    v_oauth := switchboard.oauth_purge(v_batch);
    more := todos_done >= v_batch OR todos_dead >= v_batch OR events >= v_batch OR v_oauth >= v_batch;
END
$$;
COMMENT ON FUNCTION switchboard.purge(boolean) IS
  'Retention, one bounded batch (purge_batch_size per kind) in the caller''s transaction; more=true: call again. p_dry_run counts what is past retention and deletes nothing. purge_all() loops it with a COMMIT per batch.';

-- For pg_cron and psql: every batch its own transaction, until nothing is left past retention.
CREATE OR REPLACE PROCEDURE switchboard.purge_all(
    INOUT todos_done bigint DEFAULT 0, INOUT todos_dead bigint DEFAULT 0, INOUT events bigint DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    todos_done := 0;
    todos_dead := 0;
    events := 0;
    PERFORM switchboard.expire_credentials();
    COMMIT;
    LOOP
        SELECT * INTO r FROM switchboard.purge(false);
        todos_done := todos_done + r.todos_done;
        todos_dead := todos_dead + r.todos_dead;
        events := events + r.events;
        COMMIT;
        EXIT WHEN NOT r.more;
    END LOOP;
END
$$;
COMMENT ON PROCEDURE switchboard.purge_all(bigint, bigint, bigint) IS
  'CALL switchboard.purge_all(): purge() until done, COMMIT after every batch (so no lock is held for long), and end expired rotation graces. Must run outside a transaction block (psql autocommit, pg_cron).';
