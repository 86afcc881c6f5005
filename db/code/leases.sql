-- Leases and reaping: extending a lease, retry backoff, and returning expired and parked work.
--
-- claim_next takes over its own endpoint's expired leases and due retries before claiming, so
-- no work waits for the reaper; reap() sweeps every endpoint. The servers run it on a timer and
-- a DBA may schedule it with pg_cron (one reaper runs at a time, the others return zeros).

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
COMMENT ON FUNCTION switchboard.heartbeat(uuid, uuid, int, text) IS
  'Extend a held lease: lease_expires_at = now + ttl (reset, not added). conflict unless the caller holds it.';

-- Retry delay after the given (1-based) attempt failed: min(base * 2^(attempt-1), cap).
CREATE OR REPLACE FUNCTION switchboard.backoff(p_attempt int) RETURNS interval
LANGUAGE sql STABLE AS $$
    SELECT make_interval(secs => least(
               switchboard.setting('backoff_base_seconds') * power(2::numeric, greatest(p_attempt, 1) - 1),
               switchboard.setting('backoff_cap_seconds')))
$$;
COMMENT ON FUNCTION switchboard.backoff(int) IS
  'Retry delay after attempt N failed: min(backoff_base_seconds * 2^(N-1), backoff_cap_seconds).';

-- Expired leases: back to pending while attempts remain, else dead-lettered. p_endpoint NULL = all.
-- A plain guarded UPDATE: a row a concurrent claim or reaper changed first is re-checked after its
-- lock is released and skipped when no longer expired, so no lease is requeued twice. (A
-- SKIP LOCKED pass would write a lock record for every row first: a third more WAL.)
CREATE OR REPLACE FUNCTION switchboard.requeue_expired(p_endpoint uuid DEFAULT NULL, OUT requeued int, OUT dead_lettered int)
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
CREATE OR REPLACE FUNCTION switchboard.release_retries(p_endpoint uuid DEFAULT NULL) RETURNS int
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

CREATE OR REPLACE FUNCTION switchboard.reap(OUT requeued int, OUT dead_lettered int, OUT retries_released int)
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
