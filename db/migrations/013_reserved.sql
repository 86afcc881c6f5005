-- Reserved for the events-throughput branch: migration numbers must be contiguous, and 014
-- (events-push) came first. A no-op; if that branch brings its own 013, this file goes.
SELECT 1;
