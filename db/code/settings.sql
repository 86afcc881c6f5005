-- Settings: the tunables the functions read at call time, and the one place that declares them.
--
-- To add a tunable, add one row to the catalogue below (key, default, range, whole numbers only,
-- what it does) and read it with switchboard.setting('<key>'). Every install adds the keys that
-- are new with their default and refreshes the range and description of the others; it never
-- changes a value a DBA set. The range is enforced twice: by the CHECK of the settings table
-- (so a plain UPDATE cannot leave it) and by settings_set(), which names the range in its
-- refusal. An install that narrows a range below a stored value fails on that CHECK: change the
-- value first.

INSERT INTO switchboard.settings AS s (key, value, min_value, max_value, integral, description) VALUES
    --  key                     default  min   max     whole  description
    ('backoff_base_seconds',    30,      0,    86400,  false, 'first retry delay after fail; doubles per attempt'),
    ('backoff_cap_seconds',     900,     0,    604800, false, 'upper bound of the retry delay'),
    ('max_attempts',            5,       1,    1000,   true,  'attempts a new todo gets (taken at create time)'),
    ('lease_default_seconds',   300,     1,    86400,  true,  'lease TTL when neither the call nor the endpoint names one'),
    ('lease_max_seconds',       86400,   1,    86400,  true,  'largest lease TTL a call may ask for'),
    ('doorbell_enabled',        1,       0,    1,      true,  '1: new and requeued todos signal the doorbell (pg_notify); 0: silent'),
    ('doorbell_window_ms',      40,      0,    10000,  true,  'coalescing window: at most one doorbell NOTIFY per database per window'),
    ('ring_again_seconds',      15,      1,    3600,   true,  'a todo still claimable this long after its ring went to a session that made no tool call since is rung on the next session of its endpoint'),
    ('claim_wait_max_seconds',  50,      0,    600,    true,  'longest wait_seconds of claim_next (and of next on complete, fail, release); 0 turns waiting off'),
    ('retain_done_days',        7,       0,    36500,  false, 'days a done or cancelled todo is kept before purge() deletes it'),
    ('retain_dead_days',        30,      0,    36500,  false, 'days a dead letter is kept before purge() deletes it'),
    ('retain_events_days',      14,      0,    36500,  false, 'days a webhook event is kept (longer while any of its todos is kept)'),
    ('purge_batch_size',        1000,    1,    100000, true,  'rows purge() deletes per kind and batch (each batch one short transaction)'),
    -- Body caps per source type, as each provider can send: GitHub caps payloads at 25 MB, no
    -- other documents more than 5 MiB. Larger: 413, nothing stored. Read with the webhook, so a
    -- change reaches a receiver that has the webhook cached within a minute.
    ('ingest_max_body_github',  26214400, 1024, 26214400, true, 'largest github delivery body accepted, in bytes'),
    ('ingest_max_body_gitea',   5242880, 1024, 26214400, true,  'largest gitea delivery body accepted, in bytes'),
    ('ingest_max_body_stripe',  5242880, 1024, 26214400, true,  'largest stripe delivery body accepted, in bytes'),
    ('ingest_max_body_slack',   5242880, 1024, 26214400, true,  'largest slack delivery body accepted, in bytes'),
    ('ingest_max_body_cairn',   5242880, 1024, 26214400, true,  'largest cairn delivery body accepted, in bytes'),
    ('ingest_max_body_standard', 5242880, 1024, 26214400, true, 'largest standard (Standard Webhooks) delivery body accepted, in bytes'),
    ('ingest_max_body_generic', 5242880, 1024, 26214400, true,  'largest generic delivery body accepted, in bytes')
ON CONFLICT (key) DO UPDATE
    SET min_value   = excluded.min_value,
        max_value   = excluded.max_value,
        integral    = excluded.integral,
        description = excluded.description
  WHERE (s.min_value, s.max_value, s.integral, s.description)
        IS DISTINCT FROM (excluded.min_value, excluded.max_value, excluded.integral, excluded.description);

-- PL/pgSQL rather than SQL: a non-inlinable SQL function is planned again on every call,
-- a PL/pgSQL one keeps its plan.
CREATE OR REPLACE FUNCTION switchboard.setting(p_key text) RETURNS numeric
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT value FROM switchboard.settings WHERE key = p_key);
END
$$;
COMMENT ON FUNCTION switchboard.setting(text) IS 'Current value of a tunable from switchboard.settings.';

CREATE OR REPLACE FUNCTION switchboard.settings_json() RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_object_agg(key, value ORDER BY key) FROM switchboard.settings
$$;
COMMENT ON FUNCTION switchboard.settings_json() IS 'All tunables as one JSON object.';

CREATE OR REPLACE FUNCTION switchboard.settings_set(p_key text, p_value numeric) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s switchboard.settings;
BEGIN
    SELECT * INTO s FROM switchboard.settings WHERE key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('invalid_argument', 'unknown setting');
    ELSIF p_value IS NULL OR p_value NOT BETWEEN s.min_value AND s.max_value
          OR (s.integral AND p_value <> trunc(p_value)) THEN
        PERFORM switchboard.refuse('invalid_argument',
            format('%s takes %s from %s to %s', p_key, CASE WHEN s.integral THEN 'a whole number' ELSE 'a number' END,
                   s.min_value, s.max_value));
    END IF;
    UPDATE switchboard.settings SET value = p_value WHERE key = p_key;
    -- Running servers re-read their doorbell settings when this commits (server/doorbell,
    -- listen.go); a plain UPDATE reaches them within their 30 s re-read.
    PERFORM pg_notify('switchboard_settings', p_key);
    RETURN switchboard.settings_json();
END
$$;
COMMENT ON FUNCTION switchboard.settings_set(text, numeric) IS 'Change one tunable within its range and notify switchboard_settings (running servers apply it at once); returns all of them.';
