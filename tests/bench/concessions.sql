-- A diagnostic for `go run ./tests/bench -only pgcost -sql tests/bench/concessions.sql`, not a
-- proposal: every concession issue 27's targets would ask for at once, to measure whether even
-- all of them reach the targets (they do not: docs/benchmarks.md, "Fourth round").
--   the indexes only other paths read: list_todos, purge, redelivery answers, the doorbell;
--   the state machine's CHECK and the payload-once CHECK;
--   the entry points' SECURITY DEFINER with a pinned search_path, and claim_next's enable_sort.
-- The bench runs these functions as the admin, so SECURITY INVOKER still reaches the table.
DROP INDEX switchboard.todos_recent, switchboard.todos_finished, switchboard.todos_dead,
    switchboard.todos_event, switchboard.todos_ready;
ALTER TABLE switchboard.todos DROP CONSTRAINT todos_shape, DROP CONSTRAINT todos_payload_once;
ALTER FUNCTION switchboard.claim_next(uuid, text, int, boolean) SECURITY INVOKER RESET ALL;
ALTER FUNCTION switchboard.complete(uuid, uuid, jsonb, text) SECURITY INVOKER RESET ALL;
