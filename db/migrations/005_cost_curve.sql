-- The cost curve: plans that do not depend on statistics, a doorbell read that costs what is
-- new, and one copy of a delivery's payload.

-- Doorbell: pending todos by the time they became ready, across endpoints. A '*' signal reads
-- what became ready since the bell's cursors in one walk of this index (ready_todos_since),
-- whatever the number of endpoints with sessions; one endpoint's read filters the second column.
-- Not led by endpoint_id, so it cannot stand in for todos_claimable under a claim: a planner
-- without statistics took it and sorted every pending row of the endpoint (46-56 ms a claim).
DROP INDEX switchboard.todos_ready;
CREATE INDEX todos_ready ON switchboard.todos (ready_at, endpoint_id) WHERE state = 'pending';

-- claim_next's takeover probes ("this endpoint's due retries", "its expired leases") are index
-- conditions of one index each, so a planner without statistics does not walk the endpoint's
-- whole history through todos_recent instead (70 ms a claim on a cold 100k table). The reaper's
-- global passes still lead with the deadline (leases) or read the small retry index whole.
DROP INDEX switchboard.todos_retries;
CREATE INDEX todos_retries ON switchboard.todos (endpoint_id, next_retry_at) WHERE next_retry_at IS NOT NULL;
DROP INDEX switchboard.todos_leases;
CREATE INDEX todos_leases ON switchboard.todos (lease_expires_at, endpoint_id) WHERE lease_expires_at IS NOT NULL;

-- One copy of a delivery's payload. The event holds it; the todos minted from the delivery (one
-- per target) point at the event (event_id, a foreign key: an event cannot be deleted while a
-- todo of it is kept) and read the payload through it (todo_json). Operator- and agent-created
-- todos keep their own. A 64 KiB delivery to 10 targets wrote 767 KiB of WAL, 139 KiB to one.
UPDATE switchboard.todos SET payload = NULL WHERE event_id IS NOT NULL AND payload IS NOT NULL;
ALTER TABLE switchboard.todos ADD CONSTRAINT todos_payload_once CHECK (event_id IS NULL OR payload IS NULL);
COMMENT ON COLUMN switchboard.todos.payload IS
  'The payload of a todo an operator or an agent created; NULL when event_id is set (the event''s payload is the todo''s).';
COMMENT ON COLUMN switchboard.todos.payload_size IS
  'Bytes of the payload as JSON text (the event''s payload for a todo from a delivery).';
COMMENT ON COLUMN switchboard.todos.event_id IS
  'The delivery this todo came from; its payload is read from there, so the event is kept while the todo is.';

-- History does not slow the present. Every todo passes through the partial claim index
-- (todos_claimable) and leaves a dead entry when claimed: a million todos left about 8,500 pages
-- there for an index of a few live rows. VACUUM (autovacuum) marks those pages deleted and later
-- splits reuse them, so the index stops growing at its peak; REINDEX INDEX CONCURRENTLY
-- switchboard.todos_claimable gives the space back (8,513 pages to 1): a maintenance step for a
-- busy queue (docs/benchmarks.md).
