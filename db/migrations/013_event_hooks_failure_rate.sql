-- MCP Events: a webhook subscription's delivery attempts and failures over a rolling hour, for
-- the SEP's suspension rule (db/code/events.sql, events_hooks_tally): the current hour-long
-- bucket (from tally_start) and the one before it, which a sliding-window estimate weighs.
-- Constant defaults (now() is fixed per statement): the ALTER does not rewrite the table.
ALTER TABLE switchboard.event_hooks
    ADD COLUMN tally_start    timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN tally_attempts int NOT NULL DEFAULT 0,
    ADD COLUMN tally_failures int NOT NULL DEFAULT 0,
    ADD COLUMN prior_attempts int NOT NULL DEFAULT 0,
    ADD COLUMN prior_failures int NOT NULL DEFAULT 0;
