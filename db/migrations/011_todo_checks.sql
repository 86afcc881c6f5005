-- Cheaper integrity checks on every UPDATE of a todo, with the same rules.
--
-- PostgreSQL reads back, plans and evaluates every CHECK constraint of a table on every UPDATE,
-- whichever columns change. switchboard.todos had six; `perf` of the claim+complete drain put
-- them at about 5% of PostgreSQL's CPU, a quarter of that the queue-name regex on a column no
-- verb ever changes. Now:
-- - the queue name is a domain: it is checked when a value is stored into the column (INSERT,
--   or an UPDATE that sets it), not on the updates that leave it alone;
-- - the state machine's shape is one CHECK instead of five.
-- A domain violation is SQLSTATE 23514 (check_violation), as the table CHECK was.
--
-- Changing the column's type scans the table under an ACCESS EXCLUSIVE lock: on a large queue,
-- run this migration in a quiet moment.

CREATE DOMAIN switchboard.queue_name AS text
    CHECK (VALUE ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$');
COMMENT ON DOMAIN switchboard.queue_name IS
  'A queue name: a letter or digit, then up to 127 of letters, digits and ._:-';

-- A column's type cannot change under a view: the DBA views of 005_views.sql are dropped and
-- created again as they were.
DROP VIEW switchboard.queue_depth, switchboard.leases_expiring, switchboard.dead_letters;

ALTER TABLE switchboard.todos
    DROP CONSTRAINT todos_queue_check,
    ALTER COLUMN queue TYPE switchboard.queue_name,
    DROP CONSTRAINT todos_state_check,
    DROP CONSTRAINT todos_check,
    DROP CONSTRAINT todos_check1,
    DROP CONSTRAINT todos_lease_iff_claimed,
    DROP CONSTRAINT todos_max_attempts_check,
    -- Per state: a lease exactly while claimed (with an owner), a retry time only on a failed
    -- row (set: parked retry; null: dead letter).
    ADD CONSTRAINT todos_shape CHECK (max_attempts >= 1 AND CASE state
        WHEN 'pending' THEN lease_expires_at IS NULL AND next_retry_at IS NULL
        WHEN 'claimed' THEN lease_expires_at IS NOT NULL AND owner IS NOT NULL AND next_retry_at IS NULL
        WHEN 'done'    THEN lease_expires_at IS NULL AND next_retry_at IS NULL
        WHEN 'failed'  THEN lease_expires_at IS NULL
        ELSE false
    END);

CREATE VIEW switchboard.queue_depth AS
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

CREATE VIEW switchboard.leases_expiring AS
SELECT t.id, e.slug, t.queue, t.owner, t.attempt, t.max_attempts, t.lease_expires_at,
       t.lease_expires_at - now() AS remaining
  FROM switchboard.todos t
  JOIN switchboard.endpoints e ON e.id = t.endpoint_id
 WHERE t.state = 'claimed' AND t.lease_expires_at < now() + interval '60 seconds'
 ORDER BY t.lease_expires_at;
COMMENT ON VIEW switchboard.leases_expiring IS
  'Claimed todos whose lease ends within 60 s (negative remaining: expired, waiting for a claim or the reaper).';

CREATE VIEW switchboard.dead_letters AS
SELECT t.id, e.slug, t.queue, t.title, t.owner, t.attempt, t.max_attempts, t.result, t.completed_at
  FROM switchboard.todos t
  JOIN switchboard.endpoints e ON e.id = t.endpoint_id
 WHERE t.state = 'failed' AND t.next_retry_at IS NULL
 ORDER BY t.completed_at DESC;
COMMENT ON VIEW switchboard.dead_letters IS 'Failed todos with no retry left (dead letters), newest first.';
