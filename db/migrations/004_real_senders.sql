-- Real senders: a seventh source type, standard (Standard Webhooks), and the handshake
-- disposition: an event that was a sender checking the URL (Slack url_verification, a GitHub or
-- gitea ping), kept for the record with no todo. The body caps per source type are settings
-- (db/code/settings.sql); the functions that know the new type are in db/code.

ALTER TABLE switchboard.webhooks
    DROP CONSTRAINT webhooks_source_type_check,
    ADD CONSTRAINT webhooks_source_type_check
        CHECK (source_type IN ('github', 'gitea', 'stripe', 'slack', 'cairn', 'standard', 'generic'));

ALTER TABLE switchboard.webhook_events
    DROP CONSTRAINT webhook_events_disposition_check,
    ADD CONSTRAINT webhook_events_disposition_check
        CHECK (disposition IN ('delivered', 'dropped', 'faulted', 'handshake'));
