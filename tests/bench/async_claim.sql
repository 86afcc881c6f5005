-- A diagnostic for `go run ./tests/bench -only peer -sql tests/bench/async_claim.sql`, not a
-- proposal: claims commit without waiting for their WAL flush (synchronous_commit off for the
-- claiming transaction only; complete, fail and release still wait). It measures what the
-- flush of a claim costs PostgreSQL one at a time (docs/benchmarks.md, "Batches and the peer").
-- Not taken: a PostgreSQL crash would forget the claims of its last ~0.6 s (3 x
-- wal_writer_delay), whose agents then get conflict on complete after working the todo, and
-- the todo is worked again: at-least-once widened from "an outage longer than the lease" to
-- any crash.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY['switchboard.claim_next(uuid, text, int, boolean)',
                             'switchboard.claim_next_many(uuid, int, text, int, boolean)']::regprocedure[] LOOP
        -- The definition as installed (SECURITY DEFINER, SET clauses), one line added after the
        -- body's first BEGIN.
        EXECUTE regexp_replace(pg_get_functiondef(f), E'\nBEGIN\n',
                               E'\nBEGIN\n    PERFORM set_config(''synchronous_commit'', ''off'', true);\n');
    END LOOP;
END
$$;
