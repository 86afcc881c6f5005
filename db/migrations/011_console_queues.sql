-- The console's queues and webhooks (issue 36): the home chart's aggregate, and the delivery
-- log's index and duplicate count. The functions are in db/code/console_queues.sql and console_webhooks.sql.

-- Finished todos per minute, endpoint and queue: done, failed attempts (parked for a retry),
-- dead-lettered and cancelled. Filled incrementally by switchboard.console_rollup() (the
-- server's maintenance loop, or pg_cron) from the partial indexes of finished, dead and retrying
-- todos past a watermark, so the chart never scans the history and the queue verbs write
-- nothing more. Buckets older than a day and an hour are deleted by the same function.
CREATE TABLE switchboard.todo_minutes (
    minute      timestamptz NOT NULL,
    endpoint_id uuid NOT NULL,
    queue       text NOT NULL,
    done        int NOT NULL DEFAULT 0,
    failed      int NOT NULL DEFAULT 0,
    dead        int NOT NULL DEFAULT 0,
    cancelled   int NOT NULL DEFAULT 0,
    PRIMARY KEY (endpoint_id, minute, queue)
);
CREATE INDEX todo_minutes_minute ON switchboard.todo_minutes (minute);
COMMENT ON TABLE switchboard.todo_minutes IS
  'Per minute, endpoint and queue: todos done, failed attempts parked for a retry, dead-lettered and cancelled (console_rollup; the last 25 hours).';

-- How far the rollup has counted: every todo that finished at or before this time is in
-- todo_minutes. It starts a day and an hour back, so the first runs catch up on the chart's span.
CREATE TABLE switchboard.todo_rollup_mark (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    through timestamptz NOT NULL
);
INSERT INTO switchboard.todo_rollup_mark (through) VALUES (now() - interval '25 hours');
COMMENT ON TABLE switchboard.todo_rollup_mark IS 'The watermark of console_rollup: todos finished up to here are counted.';

-- The delivery log reads one webhook's events newest first.
CREATE INDEX webhook_events_webhook ON switchboard.webhook_events (webhook_id, id);

-- Redeliveries store nothing new; the log shows how many arrived and when the last did.
ALTER TABLE switchboard.webhook_events
    ADD COLUMN duplicates        int NOT NULL DEFAULT 0,
    ADD COLUMN last_duplicate_at timestamptz;
