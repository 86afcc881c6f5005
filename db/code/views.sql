-- DBA views: what a DBA reads first. Queue depth, leases about to run out, dead letters.

CREATE OR REPLACE VIEW switchboard.queue_depth AS
SELECT e.slug,
       t.endpoint_id,
       t.queue,
       t.state,
       count(*) AS todos,
       now() - min(t.created_at) FILTER (WHERE t.state = 'pending') AS oldest_pending_age
  FROM switchboard.todos t
  JOIN switchboard.endpoints e ON e.id = t.endpoint_id
 GROUP BY e.slug, t.endpoint_id, t.queue, t.state;
COMMENT ON VIEW switchboard.queue_depth IS
  'Todos per endpoint, queue and state, with the age of the oldest pending one.';

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
SELECT t.id, e.slug, t.queue, t.title, t.owner, t.attempt, t.max_attempts, t.result, t.completed_at
  FROM switchboard.todos t
  JOIN switchboard.endpoints e ON e.id = t.endpoint_id
 WHERE t.state = 'failed' AND t.next_retry_at IS NULL
 ORDER BY t.completed_at DESC;
COMMENT ON VIEW switchboard.dead_letters IS 'Failed todos with no retry left (dead letters), newest first.';
