-- MCP Events: one outbox row per event and group of subscriptions. The fan-out wrote a row per
-- (subscription, event): at 1,000 subscriptions that copy, its take and its delete were most of
-- a delivery's statement time (docs/benchmarks.md). A group row carries its members in hook_ids
-- (hook_id is then the group's key, 'grp_...', for the unique (hook_id, message_id)); the take
-- expands it to one POST per member, and only a member whose POST failed gets a row of its own
-- (hook_ids NULL, the shape every row had). The GIN index finds the group rows a subscription
-- is in (its watermark, unsubscribe); fastupdate off: a lookup never scans a pending list.
ALTER TABLE switchboard.event_outbox ADD COLUMN hook_ids text[];
CREATE INDEX event_outbox_members ON switchboard.event_outbox USING gin (hook_ids)
    WITH (fastupdate = off) WHERE hook_ids IS NOT NULL;
-- What each delivery still writes is its subscription's row: the position at the fan-out and
-- the tally at the outcome. Neither column is indexed; with pages filled to half, both are HOT
-- updates (as the outbox's lease, migration 014).
ALTER TABLE switchboard.event_hooks SET (fillfactor = 50);
