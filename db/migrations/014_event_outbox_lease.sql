-- MCP Events: a taken outbox row's lease in a column of its own. The lease used to move the
-- row's next_at, which the due index holds, so every take rewrote all four of the outbox's
-- indexes for every row (about a third of a delivery's statement time at 1,000
-- subscriptions, docs/benchmarks.md). leased_until is in no index, and pages are filled to
-- half, so a take is a HOT update: the row version beside the old one on its page, no index
-- touched. Nullable, no default: the ALTER does not rewrite the table.
ALTER TABLE switchboard.event_outbox ADD COLUMN leased_until timestamptz;
ALTER TABLE switchboard.event_outbox SET (fillfactor = 50);
