-- DBA views: what a DBA reads first. Queue depth, leases about to run out, dead letters.

CREATE OR REPLACE VIEW switchboard.queue_depth AS
SELECT e.slug,
       t.endpoint_id,
       t.queue,
       CASE WHEN t.state <> 'failed' THEN t.state
            WHEN t.next_retry_at IS NULL THEN 'dead_letter'
            ELSE 'retry_wait' END AS state,
       count(*) AS todos,
       now() - min(t.created_at) FILTER (WHERE t.state = 'pending') AS oldest_pending_age
  FROM switchboard.todos t
  JOIN switchboard.endpoints e ON e.id = t.endpoint_id
 GROUP BY 1, 2, 3, 4;
COMMENT ON VIEW switchboard.queue_depth IS
  'Todos per endpoint, queue and state (pending, claimed, retry_wait: a parked retry, dead_letter, done, cancelled), with the age of the oldest pending one.';

CREATE OR REPLACE VIEW switchboard.leases_expiring AS
SELECT t.id, e.slug, t.queue, t.owner, t.attempt, t.max_attempts, t.lease_expires_at,
       t.lease_expires_at - now() AS remaining
  FROM switchboard.todos t
  JOIN switchboard.endpoints e ON e.id = t.endpoint_id
 WHERE t.state = 'claimed' AND t.lease_expires_at < now() + interval '60 seconds'
 ORDER BY t.lease_expires_at;
COMMENT ON VIEW switchboard.leases_expiring IS
  'Claimed todos whose lease ends within 60 s (negative remaining: expired, waiting for a claim or the reaper).';

CREATE OR REPLACE VIEW switchboard.dead_letters AS
SELECT t.id, e.slug, t.endpoint_id, t.queue, t.title, t.owner, t.attempt, t.max_attempts, t.result,
       t.completed_at, t.redrives, t.redriven_at, t.redriven_by
  FROM switchboard.todos t
  JOIN switchboard.endpoints e ON e.id = t.endpoint_id
 WHERE t.state = 'failed' AND t.next_retry_at IS NULL
 ORDER BY t.completed_at DESC;
COMMENT ON VIEW switchboard.dead_letters IS
  'Failed todos with no retry left (dead letters), newest first; redrive them with switchboard.redrive().';
