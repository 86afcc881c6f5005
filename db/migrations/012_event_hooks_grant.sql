-- MCP Events: the OAuth grant a webhook subscription was made (or last refreshed) with, so that
-- revoking that grant ends the subscription (db/code/events.sql, events_terminate_grants).
-- NULL: made with the endpoint's sbk_ credential (revocation and rotation of the endpoint end
-- those). Nullable, no default: the ALTER does not rewrite the table.
ALTER TABLE switchboard.event_hooks
    ADD COLUMN grant_id uuid REFERENCES switchboard.oauth_grants ON DELETE CASCADE;
CREATE INDEX event_hooks_grant ON switchboard.event_hooks (grant_id) WHERE grant_id IS NOT NULL;
