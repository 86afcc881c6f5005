-- MCP Events (SEP-3415, docs/events.md): event types, cursors, poll, webhook subscriptions and
-- their outbox.
--
-- Two event types. todo.claimable rows are written by events_record(), a tick the servers run
-- (never by the queue verbs: claims and completions pay nothing for events). webhook.delivery
-- is read straight from webhook_events, the rows ingest writes anyway.
--
-- Positions are (xact, seq) (migration 009): a reader takes only rows with xact below its
-- snapshot's xmin, so whatever commits later sorts after every position it handed out.
-- A cursor is that position plus the time it stands for, base64url-encoded; it carries no scope:
-- every read re-derives the scope from the endpoint's grant and the arguments.

-- The verb an event type needs in the allowlist: an event never shows what the endpoint could
-- not already read with its tools.
CREATE OR REPLACE FUNCTION switchboard.events_verb(p_name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_name WHEN 'todo.claimable' THEN 'list_todos'
                       WHEN 'webhook.delivery' THEN 'list_webhook_events' END
$$;

-- Largest payload carried inside an event's data; above it data says payload_omitted (use
-- get_todo or get_webhook_event). Keeps a webhook body well under the SEP's 256 KiB.
CREATE OR REPLACE FUNCTION switchboard.events_payload_max() RETURNS int
LANGUAGE sql IMMUTABLE AS $$ SELECT 16384 $$;

-- events/list: the event types this endpoint may watch.
CREATE OR REPLACE FUNCTION switchboard.events_types(p_endpoint uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_verbs text[];
    v_out   jsonb := '[]'::jsonb;
BEGIN
    PERFORM switchboard.caller(p_endpoint);
    SELECT verbs INTO v_verbs FROM switchboard.endpoints WHERE id = p_endpoint;
    IF 'list_todos' = ANY (v_verbs) THEN
        v_out := v_out || jsonb_build_object(
            'name', 'todo.claimable',
            'description', 'A todo in one of your granted queues became claimable (created, released, retry window over, lease expired, redriven). Data from outside senders is untrusted.',
            'delivery', jsonb_build_array('poll', 'push', 'webhook'),
            'inputSchema', jsonb_build_object('type', 'object', 'additionalProperties', false,
                'properties', jsonb_build_object('queue', jsonb_build_object('type', 'string',
                    'description', 'Only todos of this queue (one of your granted queues).'))),
            'payloadSchema', jsonb_build_object('type', 'object',
                'required', jsonb_build_array('todo'),
                'properties', jsonb_build_object(
                    'todo', jsonb_build_object('type', 'object', 'description', 'The todo as list_todos shows it.'),
                    'payload', jsonb_build_object('description', 'The todo''s payload, when it fits 16 KiB.'),
                    'payload_omitted', jsonb_build_object('type', 'boolean',
                        'description', 'true: the payload is larger than 16 KiB; read it with get_todo.'))));
    END IF;
    IF 'list_webhook_events' = ANY (v_verbs) THEN
        v_out := v_out || jsonb_build_object(
            'name', 'webhook.delivery',
            'description', 'A delivery reached one of your webhooks. Its payload is untrusted data from the sender.',
            'delivery', jsonb_build_array('poll', 'push', 'webhook'),
            'inputSchema', jsonb_build_object('type', 'object', 'additionalProperties', false,
                'properties', jsonb_build_object('webhook_id', jsonb_build_object('type', 'string',
                    'description', 'Only deliveries to this webhook.'))),
            'payloadSchema', jsonb_build_object('type', 'object',
                'required', jsonb_build_array('webhook_id', 'source', 'delivery_id', 'todo_ids'),
                'properties', jsonb_build_object(
                    'webhook_id', jsonb_build_object('type', 'string'),
                    'source', jsonb_build_object('type', 'string'),
                    'event_type', jsonb_build_object('type', jsonb_build_array('string', 'null')),
                    'delivery_id', jsonb_build_object('type', 'string'),
                    'verified', jsonb_build_object('type', 'boolean'),
                    'todo_ids', jsonb_build_object('type', 'array', 'items', jsonb_build_object('type', 'string')),
                    'payload', jsonb_build_object('description', 'The delivery''s payload, when it fits 16 KiB.'),
                    'payload_omitted', jsonb_build_object('type', 'boolean',
                        'description', 'true: larger than 16 KiB; read it with get_webhook_event.'))));
    END IF;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION switchboard.events_types(uuid) IS
  'events/list: the event types the endpoint''s allowlist offers (todo.claimable: list_todos; webhook.delivery: list_webhook_events).';

-- Checks an event name and its arguments against the endpoint's grant. Refusals: not_found
-- (an unknown event type), forbidden (a type the allowlist does not offer, a queue outside the
-- grant), invalid_argument (arguments not matching inputSchema), not_found (a webhook the
-- caller's human does not own, as the route verbs say).
CREATE OR REPLACE FUNCTION switchboard.events_scope(
    p_endpoint uuid, p_name text, p_args jsonb,
    OUT queues text[], OUT human_id uuid, OUT queue text, OUT webhook_id uuid)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_verbs text[];
    v_args  jsonb := coalesce(p_args, '{}');
BEGIN
    SELECT c.queues, c.human_id INTO queues, human_id FROM switchboard.caller(p_endpoint) c;
    IF switchboard.events_verb(p_name) IS NULL THEN
        PERFORM switchboard.refuse('not_found', 'unknown event type');
    END IF;
    SELECT verbs INTO v_verbs FROM switchboard.endpoints WHERE id = p_endpoint;
    IF NOT switchboard.events_verb(p_name) = ANY (v_verbs) THEN
        PERFORM switchboard.refuse('forbidden', 'event type needs ' || switchboard.events_verb(p_name) || ' in the allowlist');
    END IF;
    IF jsonb_typeof(v_args) <> 'object' THEN
        PERFORM switchboard.refuse('invalid_argument', 'arguments must be an object');
    END IF;
    IF p_name = 'todo.claimable' THEN
        IF EXISTS (SELECT 1 FROM jsonb_object_keys(v_args) k WHERE k <> 'queue') THEN
            PERFORM switchboard.refuse('invalid_argument', 'todo.claimable takes only queue');
        ELSIF v_args ? 'queue' AND jsonb_typeof(v_args -> 'queue') <> 'string' THEN
            PERFORM switchboard.refuse('invalid_argument', 'queue must be a string');
        END IF;
        queue := v_args ->> 'queue';
        IF queue IS NOT NULL AND NOT queue = ANY (queues) THEN
            PERFORM switchboard.refuse('forbidden', 'queue is outside the granted queues');
        END IF;
    ELSE
        IF EXISTS (SELECT 1 FROM jsonb_object_keys(v_args) k WHERE k <> 'webhook_id') THEN
            PERFORM switchboard.refuse('invalid_argument', 'webhook.delivery takes only webhook_id');
        ELSIF v_args ? 'webhook_id' AND jsonb_typeof(v_args -> 'webhook_id') <> 'string' THEN
            PERFORM switchboard.refuse('invalid_argument', 'webhook_id must be a string');
        END IF;
        IF v_args ? 'webhook_id' THEN
            webhook_id := (switchboard.owned_webhook(p_endpoint, v_args ->> 'webhook_id')).id;
        END IF;
    END IF;
END
$$;

-- Cursors: base64url of "1|<kind>|<xact>|<seq>|<unix seconds>". The time is when the position
-- stood (for truncation: a cursor older than retention may have lost rows after it).
-- STABLE, as what it calls (convert_to, extract): so it is inlined where it is used.
CREATE OR REPLACE FUNCTION switchboard.events_cursor(p_name text, p_xact xid8, p_seq bigint, p_at timestamptz)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT rtrim(translate(encode(convert_to(concat_ws('|', '1', p_name, p_xact::text, p_seq::text,
                                                       floor(extract(epoch FROM p_at))::bigint::text), 'UTF8'),
                                  'base64'), E'+/\n', '-_'), '=')
$$;

-- A cursor's parts, or invalid_argument for anything this server did not mint for p_name (or
-- one ahead of every transaction so far).
CREATE OR REPLACE FUNCTION switchboard.events_cursor_parse(
    p_name text, p_cursor text, OUT xact xid8, OUT seq bigint, OUT at timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_text  text;
    v_parts text[];
BEGIN
    BEGIN
        v_text := translate(p_cursor, '-_', '+/');
        v_text := v_text || repeat('=', (4 - length(v_text) % 4) % 4);
        v_parts := string_to_array(convert_from(decode(v_text, 'base64'), 'UTF8'), '|');
        IF cardinality(v_parts) = 5 AND v_parts[1] = '1' AND v_parts[2] = p_name
           AND v_parts[3] ~ '^[0-9]{1,19}$' AND v_parts[4] ~ '^[0-9]{1,18}$' AND v_parts[5] ~ '^[0-9]{1,12}$' THEN
            xact := v_parts[3]::xid8;
            seq := v_parts[4]::bigint;
            at := to_timestamp(v_parts[5]::bigint);
        END IF;
    EXCEPTION WHEN others THEN
        xact := NULL;
    END;
    IF xact IS NULL OR xact > pg_snapshot_xmax(pg_current_snapshot()) OR at > now() + interval '1 hour' THEN
        PERFORM switchboard.refuse('invalid_argument', 'cursor is malformed or not for this event type');
    END IF;
END
$$;

-- The occurrences of one endpoint's subscription after a position and below a bound, in order.
-- Scope (granted queues, the human's webhooks, the arguments) is applied here, on every read.
CREATE OR REPLACE FUNCTION switchboard.events_read(
    p_name text, p_endpoint uuid, p_queues text[], p_human uuid, p_queue text, p_webhook uuid,
    p_after_xact xid8, p_after_seq bigint, p_bound xid8, p_floor timestamptz, p_limit int)
RETURNS TABLE (xact xid8, seq bigint, event_id text, occurred_at timestamptz, data jsonb)
-- A read is usually a few rows (the default estimate, 1,000, priced the fan-out's copy of a
-- read for 1,000 subscriptions at a million rows, and JIT-compiled it: 20 ms a tick).
LANGUAGE plpgsql STABLE ROWS 10 AS $$
#variable_conflict use_column
BEGIN
    IF p_name = 'todo.claimable' THEN
        RETURN QUERY
        SELECT l.xact, l.seq, l.event_id, l.occurred_at, l.data
          FROM switchboard.event_log l
         WHERE l.endpoint_id = p_endpoint AND (l.xact, l.seq) > (p_after_xact, p_after_seq)
           AND l.xact < p_bound AND l.queue = ANY (p_queues)
           AND (p_queue IS NULL OR l.queue = p_queue)
           AND (p_floor IS NULL OR l.occurred_at >= p_floor)
         ORDER BY l.xact, l.seq
         LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT ev.xact, ev.id, 'delivery_' || ev.id, ev.received_at,
               jsonb_build_object(
                   'webhook_id', ev.webhook_id,
                   'source', ev.source,
                   'event_type', ev.event_type,
                   'delivery_id', ev.delivery_key,
                   'verified', ev.verified,
                   'disposition', ev.disposition,
                   'received_at', switchboard.rfc3339(ev.received_at),
                   'todo_ids', coalesce((SELECT jsonb_agg(t.id ORDER BY t.created_at, t.id)
                                           FROM switchboard.todos t WHERE t.event_id = ev.id), '[]'))
               || CASE WHEN ev.payload_size <= switchboard.events_payload_max()
                       THEN jsonb_build_object('payload', ev.payload)
                       ELSE jsonb_build_object('payload_omitted', true) END
          FROM switchboard.webhook_events ev
          JOIN switchboard.webhooks w ON w.id = ev.webhook_id
          JOIN switchboard.endpoints e ON e.id = w.endpoint_id
          JOIN switchboard.agents a ON a.id = e.agent_id
         WHERE ev.xact IS NOT NULL AND (ev.xact, ev.id) > (p_after_xact, p_after_seq) AND ev.xact < p_bound
           AND a.owner_human_id = p_human
           AND (p_webhook IS NULL OR ev.webhook_id = p_webhook)
           AND (p_floor IS NULL OR ev.received_at >= p_floor)
         ORDER BY ev.xact, ev.id
         LIMIT p_limit;
    END IF;
END
$$;

-- An endpoint asked for events: the recorder writes its todo.claimable from now on. At most one
-- write a minute per endpoint.
CREATE OR REPLACE FUNCTION switchboard.events_touch(p_endpoint uuid) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO switchboard.event_interest AS i (endpoint_id) VALUES (p_endpoint)
    ON CONFLICT (endpoint_id) DO UPDATE SET seen_at = now() WHERE i.seen_at < now() - interval '1 minute'
$$;

-- events/poll. One call: checks, reads, and answers the SEP's result (without resultType).
-- A null cursor starts from now. maxAgeMs floors the replay (truncated when the cursor was
-- older). A cursor older than retention is truncated too: rows after it may be gone.
CREATE OR REPLACE FUNCTION switchboard.events_poll(
    p_endpoint uuid, p_name text, p_args jsonb, p_cursor text, p_max_events int DEFAULT NULL,
    p_max_age_ms bigint DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    s          record;
    c          record;
    v_bound    xid8 := pg_snapshot_xmin(pg_current_snapshot());
    v_limit    int := greatest(1, least(coalesce(p_max_events, 100), 500));
    v_floor    timestamptz;
    v_trunc    boolean := false;
    v_events   jsonb;
    v_n        int;
    v_last     record;
BEGIN
    SELECT * INTO s FROM switchboard.events_scope(p_endpoint, p_name, p_args);
    IF p_max_events IS NOT NULL AND p_max_events < 1 OR p_max_age_ms IS NOT NULL AND p_max_age_ms < 0 THEN
        PERFORM switchboard.refuse('invalid_argument', 'maxEvents must be at least 1 and maxAgeMs not negative');
    END IF;
    PERFORM switchboard.events_touch(p_endpoint);
    IF p_cursor IS NULL THEN
        RETURN jsonb_build_object('events', '[]'::jsonb, 'cursor', switchboard.events_cursor(p_name, v_bound, 0, now()),
                                  'truncated', false, 'hasMore', false, 'nextPollMs', 5000);
    END IF;
    SELECT * INTO c FROM switchboard.events_cursor_parse(p_name, p_cursor);
    IF c.at < now() - make_interval(days => switchboard.setting('retain_events_days')::int) THEN
        v_trunc := true;
    END IF;
    IF p_max_age_ms IS NOT NULL THEN
        v_floor := now() - make_interval(secs => p_max_age_ms / 1000.0);
        v_trunc := v_trunc OR c.at < v_floor;
    END IF;

    SELECT coalesce(jsonb_agg(jsonb_build_object('eventId', r.event_id, 'name', p_name,
                                                 'timestamp', switchboard.rfc3339(r.occurred_at), 'data', r.data)
                              ORDER BY r.xact, r.seq) FILTER (WHERE r.n <= v_limit), '[]'),
           count(*)
      INTO v_events, v_n
      FROM (SELECT x.*, row_number() OVER (ORDER BY x.xact, x.seq) AS n
              FROM switchboard.events_read(p_name, p_endpoint, s.queues, s.human_id, s.queue, s.webhook_id,
                                           c.xact, c.seq, v_bound, v_floor, v_limit + 1) x) r;
    IF v_n > v_limit THEN
        SELECT x.xact, x.seq, x.occurred_at INTO v_last
          FROM switchboard.events_read(p_name, p_endpoint, s.queues, s.human_id, s.queue, s.webhook_id,
                                       c.xact, c.seq, v_bound, v_floor, v_limit) x
         ORDER BY x.xact DESC, x.seq DESC LIMIT 1;
        RETURN jsonb_build_object('events', v_events,
                                  'cursor', switchboard.events_cursor(p_name, v_last.xact, v_last.seq, v_last.occurred_at),
                                  'truncated', v_trunc, 'hasMore', true, 'nextPollMs', 0);
    END IF;
    -- Everything below the bound has been read: the cursor moves to it (never back).
    IF (v_bound, 0::bigint) < (c.xact, c.seq) THEN
        RETURN jsonb_build_object('events', v_events, 'cursor', switchboard.events_cursor(p_name, c.xact, c.seq, now()),
                                  'truncated', v_trunc, 'hasMore', false, 'nextPollMs', 5000);
    END IF;
    RETURN jsonb_build_object('events', v_events, 'cursor', switchboard.events_cursor(p_name, v_bound, 0, now()),
                              'truncated', v_trunc, 'hasMore', false,
                              'nextPollMs', CASE WHEN v_n > 0 THEN 1000 ELSE 5000 END);
END
$$;
COMMENT ON FUNCTION switchboard.events_poll(uuid, text, jsonb, text, int, bigint) IS
  'events/poll: occurrences after the cursor (null: none, a cursor at now), bounded by the oldest transaction in flight, within the endpoint''s scope.';

-- The todo.claimable eventId: one per (todo, attempt) — a todo is claimable at most once per
-- attempt number (a claim raises it) — plus the moment for a redriven todo (attempt back to 0).
CREATE OR REPLACE FUNCTION switchboard.events_todo_id(t switchboard.todos) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT 'todo_' || t.id || '_' || t.attempt
           || CASE WHEN t.attempt = 0 AND t.ready_at <> t.created_at
                   THEN '_' || floor(extract(epoch FROM t.ready_at) * 1000000)::bigint ELSE '' END
$$;

-- The recorder: writes todo.claimable for endpoints that use events. Todos that became pending
-- since the window's mark (todos_ready), and todos time made claimable (an expired lease with an
-- attempt left, an elapsed retry window), each once (event_id is unique). The mark advances to
-- the previous tick's time only when every transaction in flight at that tick has ended, and the
-- window reaches 5 s further back for a transaction that took its now() before it wrote.
-- One server at a time (an advisory lock); the others skip.
CREATE OR REPLACE FUNCTION switchboard.events_record() RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r      switchboard.event_recorder;
    v_snap pg_snapshot := pg_current_snapshot();
    v_from timestamptz;
    v_n    int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM switchboard.event_interest)
       OR NOT pg_try_advisory_xact_lock(hashtext('switchboard.events_record')) THEN
        RETURN 0; -- nobody uses events: the tick costs one probe
    END IF;
    SELECT * INTO r FROM switchboard.event_recorder;
    IF pg_snapshot_xmin(v_snap) >= r.next_xmax THEN
        UPDATE switchboard.event_recorder
           SET mark = r.next_mark, next_mark = now(), next_xmax = pg_snapshot_xmax(v_snap);
        r.mark := r.next_mark;
    END IF;
    v_from := r.mark - interval '5 seconds';

    INSERT INTO switchboard.event_log (kind, event_id, endpoint_id, queue, todo_id, occurred_at, data)
    SELECT 'todo.claimable', switchboard.events_todo_id(t), t.endpoint_id, t.queue, t.id, d.at,
           jsonb_build_object('todo', switchboard.todo_json(t))
           || CASE WHEN t.payload_size <= switchboard.events_payload_max()
                   THEN jsonb_build_object('payload', switchboard.todo_detail_json(t) -> 'payload')
                   ELSE jsonb_build_object('payload_omitted', true) END
      FROM (SELECT t.id, t.ready_at AS at FROM switchboard.todos t
             WHERE t.state = 'pending' AND t.ready_at >= v_from
            UNION ALL
            SELECT t.id, t.lease_expires_at FROM switchboard.todos t
             WHERE t.lease_expires_at >= v_from AND t.lease_expires_at <= now() AND t.state = 'claimed'
               AND t.attempt < t.max_attempts
            UNION ALL
            SELECT t.id, t.next_retry_at FROM switchboard.todos t
             WHERE t.next_retry_at >= v_from AND t.next_retry_at <= now()) d
      JOIN switchboard.todos t ON t.id = d.id
      JOIN switchboard.event_interest i ON i.endpoint_id = t.endpoint_id
     WHERE NOT EXISTS (SELECT 1 FROM switchboard.event_log l WHERE l.event_id = switchboard.events_todo_id(t))
    ON CONFLICT (event_id) DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION switchboard.events_record() IS
  'MCP Events tick: record todo.claimable for endpoints that use events (became pending, lease expired, retry window over), once each. One server at a time.';

-- Subscription id: derived from (endpoint, url, name, arguments); jsonb's text form is canonical.
CREATE OR REPLACE FUNCTION switchboard.events_hook_id(p_endpoint uuid, p_url text, p_name text, p_args jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'sub_' || left(encode(sha256(convert_to(concat_ws(E'\n', p_endpoint::text, p_url, p_name,
                                                             coalesce(p_args, '{}')::text), 'UTF8')), 'hex'), 32)
$$;

-- The safe-to-persist watermark of a subscription: just before its oldest event still in the
-- outbox (sent or not; in a row of its own or in a group row it is a member of), else its
-- fan-out position. A one-row table function so that a query over many rows
-- (events_outbox_take) gets it inlined as a join instead of a call per row.
CREATE OR REPLACE FUNCTION switchboard.events_watermark_at(p_hook text, p_name text, p_pos_xact xid8, p_pos_seq bigint)
RETURNS TABLE (watermark text)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT switchboard.events_cursor(p_name, o.xact, o.seq - 1, o.created_at)
           FROM ((SELECT o.xact, o.seq, o.created_at FROM switchboard.event_outbox o
                   WHERE o.hook_id = p_hook AND o.xact IS NOT NULL
                   ORDER BY o.xact, o.seq LIMIT 1)
                 UNION ALL
                 (SELECT o.xact, o.seq, o.created_at FROM switchboard.event_outbox o
                   WHERE o.hook_ids @> ARRAY[p_hook] AND o.hook_ids IS NOT NULL
                   ORDER BY o.xact, o.seq LIMIT 1)) o
          ORDER BY o.xact, o.seq LIMIT 1),
        switchboard.events_cursor(p_name, p_pos_xact, p_pos_seq, now()))
$$;

-- Removes subscriptions from the group rows they are members of (they left, lapsed or ended);
-- a group row left without members goes.
CREATE OR REPLACE FUNCTION switchboard.events_outbox_leave(p_hooks text[]) RETURNS void
LANGUAGE sql AS $$
    WITH g AS (
        UPDATE switchboard.event_outbox o
           SET hook_ids = ARRAY(SELECT m FROM unnest(o.hook_ids) m WHERE NOT m = ANY (p_hooks))
         WHERE o.hook_ids && p_hooks AND o.hook_ids IS NOT NULL
        RETURNING o.id, o.hook_ids)
    DELETE FROM switchboard.event_outbox o USING g WHERE o.id = g.id AND g.hook_ids = '{}';
$$;
COMMENT ON FUNCTION switchboard.events_outbox_leave(text[]) IS
  'Removes subscriptions from the outbox''s group rows (a row left without members goes).';

CREATE OR REPLACE FUNCTION switchboard.events_watermark(h switchboard.event_hooks) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT w.watermark FROM switchboard.events_watermark_at(h.id, h.name, h.pos_xact, h.pos_seq) w
$$;

CREATE OR REPLACE FUNCTION switchboard.events_delivery_status(h switchboard.event_hooks) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('active', h.active, 'lastDeliveryAt', switchboard.rfc3339(h.last_delivery_at),
                              'lastError', h.last_error)
           || CASE WHEN h.failed_since IS NOT NULL
                   THEN jsonb_build_object('failedSince', switchboard.rfc3339(h.failed_since)) ELSE '{}' END
$$;

-- events/subscribe (webhook). The server (Go) has checked the URL against its SSRF rules; this
-- checks the rest. A URL the endpoint has not verified answers {verify: true, id} and stores
-- nothing: the server sends the signed challenge and calls again with p_verified.
-- p_ttl_ms: NULL = server default (1 h); -1 = the client asked for no expiry (granted 24 h);
-- else clamped to 1 min .. 24 h. p_cred: the hash of the request's bearer credential; when it
-- is an OAuth access token, the subscription remembers its grant (revoking the grant ends it).
CREATE OR REPLACE FUNCTION switchboard.events_subscribe(
    p_endpoint uuid, p_name text, p_args jsonb, p_url text, p_secret text, p_cursor text,
    p_max_age_ms bigint, p_ttl_ms bigint, p_verified boolean, p_cred bytea DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_grant   uuid;
    v_cx      xid8;
    v_cs      bigint;
    v_cat     timestamptz;
    h         switchboard.event_hooks;
    v_args    jsonb := coalesce(p_args, '{}');
    v_id      text;
    v_bound   xid8 := pg_snapshot_xmin(pg_current_snapshot());
    v_ttl     interval;
    v_trunc   boolean := false;
    v_key     bytea;
    v_live    boolean;
    v_refresh boolean;
    v_floor   timestamptz;
    v_was_active boolean;
    s         record;
    f         record;
BEGIN
    SELECT * INTO s FROM switchboard.events_scope(p_endpoint, p_name, v_args);
    IF p_max_age_ms IS NOT NULL AND p_max_age_ms < 0 THEN
        PERFORM switchboard.refuse('invalid_argument', 'maxAgeMs must not be negative');
    END IF;
    BEGIN
        v_key := decode(substr(p_secret, 7), 'base64');
    EXCEPTION WHEN others THEN
        v_key := NULL;
    END;
    IF p_secret IS NULL OR p_secret !~ '^whsec_[A-Za-z0-9+/]+={0,2}$' OR v_key IS NULL
       OR octet_length(v_key) NOT BETWEEN 24 AND 64 THEN
        PERFORM switchboard.refuse('invalid_argument', 'delivery.secret must be whsec_ and the base64 of 24 to 64 bytes');
    END IF;
    IF p_url IS NULL OR length(p_url) > 2048 THEN
        PERFORM switchboard.refuse('invalid_argument', 'delivery.url is missing or too long');
    END IF;
    IF p_cursor IS NOT NULL THEN
        SELECT x.xact, x.seq, x.at INTO v_cx, v_cs, v_cat FROM switchboard.events_cursor_parse(p_name, p_cursor) x;
    END IF;
    v_id := switchboard.events_hook_id(p_endpoint, p_url, p_name, v_args);
    SELECT t.grant_id INTO v_grant FROM switchboard.oauth_tokens t WHERE t.signature = p_cred AND t.kind = 'access';
    IF v_grant IS NOT NULL THEN
        -- Share-locks the grant against a concurrent revocation (which updates its row): either
        -- that revocation ends this subscription (events_terminate_grants) or this sees it.
        PERFORM 1 FROM switchboard.oauth_grants g WHERE g.id = v_grant AND g.revoked_at IS NULL FOR SHARE;
        IF NOT FOUND THEN
            PERFORM switchboard.refuse('forbidden', 'the OAuth grant was revoked');
        END IF;
    END IF;
    IF NOT p_verified AND NOT EXISTS (SELECT 1 FROM switchboard.event_callbacks
                                       WHERE endpoint_id = p_endpoint AND url = p_url) THEN
        RETURN jsonb_build_object('verify', true, 'id', v_id);
    END IF;
    IF p_verified THEN
        INSERT INTO switchboard.event_callbacks (endpoint_id, url) VALUES (p_endpoint, p_url)
        ON CONFLICT (endpoint_id, url) DO UPDATE SET verified_at = now();
    END IF;
    PERFORM switchboard.events_touch(p_endpoint);

    v_ttl := CASE WHEN p_ttl_ms IS NULL THEN interval '1 hour'
                  WHEN p_ttl_ms = -1 THEN interval '24 hours'
                  ELSE make_interval(secs => greatest(60, least(p_ttl_ms / 1000.0, 86400))) END;

    SELECT * INTO h FROM switchboard.event_hooks WHERE id = v_id FOR UPDATE;
    v_refresh := FOUND;
    v_was_active := h.active; -- deliveryStatus.active: false says this refresh lifted a suspension
    v_live := FOUND AND h.refresh_before > now();
    IF NOT v_live THEN
        -- New, or lapsed: delivery starts at the client's cursor (replay), else now.
        IF v_cx IS NOT NULL THEN
            v_trunc := v_cat < now() - make_interval(days => switchboard.setting('retain_events_days')::int);
            v_floor := now() - make_interval(secs => p_max_age_ms / 1000.0);
            IF v_cat < v_floor THEN
                -- maxAgeMs floors the replay: it starts just before the first occurrence after
                -- the cursor that is not older than the floor (a seek by time), else at now.
                v_trunc := true;
                SELECT r.xact, r.seq INTO f
                  FROM switchboard.events_read(p_name, p_endpoint, s.queues, s.human_id, s.queue, s.webhook_id,
                                               v_cx, v_cs, v_bound, v_floor, 1) r;
                IF f.xact IS NOT NULL THEN
                    v_cx := f.xact;
                    v_cs := f.seq - 1;
                ELSE
                    v_cx := v_bound;
                    v_cs := 0;
                END IF;
            END IF;
        END IF;
        DELETE FROM switchboard.event_outbox WHERE hook_id = v_id;
        PERFORM switchboard.events_outbox_leave(ARRAY[v_id]);
        INSERT INTO switchboard.event_hooks AS x (id, endpoint_id, name, arguments, url, secret, pos_xact, pos_seq,
                                                  refresh_before, grant_id)
        VALUES (v_id, p_endpoint, p_name, v_args, p_url, p_secret,
                coalesce(v_cx, v_bound), coalesce(v_cs, 0), now() + v_ttl, v_grant)
        ON CONFLICT (id) DO UPDATE
            SET secret = excluded.secret, previous_secret = NULL, previous_until = NULL,
                pos_xact = excluded.pos_xact, pos_seq = excluded.pos_seq,
                refresh_before = excluded.refresh_before, active = true, failures = 0, failed_since = NULL,
                last_error = NULL, refreshed_at = now(), grant_id = excluded.grant_id,
                tally_start = now(), tally_attempts = 0, tally_failures = 0, prior_attempts = 0, prior_failures = 0
        RETURNING * INTO h;
        IF v_trunc THEN
            -- The receiver hears of the gap too (the SEP's gap envelope, with the cursor delivery
            -- resumes from: what is still kept after it); the fan-out waits until it is out.
            INSERT INTO switchboard.event_outbox (hook_id, message_id, body)
            VALUES (v_id, 'msg_gap_' || replace(gen_random_uuid()::text, '-', ''),
                    jsonb_build_object('type', 'gap', 'cursor', switchboard.events_watermark(h)));
        END IF;
    ELSE
        -- Live: the cursor is a no-op; the TTL is granted again, a new secret replaces the old
        -- one (both sign for 5 minutes), delivery is active again. A suspended one starts a
        -- fresh sample for the failure rate (else its next failure suspends it again).
        UPDATE switchboard.event_hooks x
           SET tally_start = now(), tally_attempts = 0, tally_failures = 0, prior_attempts = 0, prior_failures = 0
         WHERE x.id = v_id AND NOT x.active;
        UPDATE switchboard.event_hooks x
           SET previous_secret = CASE WHEN x.secret <> p_secret THEN x.secret ELSE x.previous_secret END,
               previous_until  = CASE WHEN x.secret <> p_secret THEN now() + interval '5 minutes' ELSE x.previous_until END,
               secret = p_secret, refresh_before = now() + v_ttl, active = true, refreshed_at = now(),
               grant_id = v_grant
         WHERE x.id = v_id
        RETURNING * INTO h;
    END IF;
    RETURN jsonb_build_object('id', h.id, 'refreshBefore', switchboard.rfc3339(h.refresh_before),
                              'cursor', switchboard.events_watermark(h), 'truncated', v_trunc)
           || CASE WHEN v_refresh THEN jsonb_build_object('deliveryStatus', switchboard.events_delivery_status(h)
                                                                || jsonb_build_object('active', v_was_active))
                   ELSE '{}' END;
END
$$;
COMMENT ON FUNCTION switchboard.events_subscribe(uuid, text, jsonb, text, text, text, bigint, bigint, boolean, bytea) IS
  'events/subscribe: upsert a webhook subscription keyed by (endpoint, url, name, arguments); {verify, id} while the URL is unverified.';

CREATE OR REPLACE FUNCTION switchboard.events_unsubscribe(p_endpoint uuid, p_name text, p_args jsonb, p_url text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
BEGIN
    PERFORM switchboard.caller(p_endpoint);
    DELETE FROM switchboard.event_hooks
     WHERE id = switchboard.events_hook_id(p_endpoint, p_url, p_name, coalesce(p_args, '{}'))
    RETURNING id INTO v_id;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'no such subscription');
    END IF;
    DELETE FROM switchboard.event_outbox WHERE hook_id = v_id;
    PERFORM switchboard.events_outbox_leave(ARRAY[v_id]);
    RETURN '{}'::jsonb;
END
$$;

-- The most members a group row of the outbox has: a take (the servers take 128 POSTs at a
-- time) is never more POSTs than the larger of the two, which their lease is sized for.
CREATE OR REPLACE FUNCTION switchboard.events_group_max() RETURNS int
LANGUAGE sql IMMUTABLE AS $$ SELECT 128 $$;
COMMENT ON FUNCTION switchboard.events_group_max() IS
  'The most subscriptions one MCP Events outbox group row carries (one event, one POST each).';

-- Fan-out: the new occurrences of every live subscription go to the outbox, and each
-- subscription's position moves to the bound. One server at a time; a double fan-out cannot
-- happen (the lock, and the outbox's unique (hook, message)). Set-based: subscriptions that
-- share (name, endpoint, arguments) read the same occurrences, so they are read once per group
-- from its oldest position (scope re-derived by events_read) and each event goes to the members
-- whose position is before it, one outbox row per event and (at most 128) members;
-- the positions move in one UPDATE at the end. p_hooks bounds the subscriptions one call
-- handles (NULL: all), so a server can send the first ones' rows while it fans out the rest.
-- Answers the number of subscriptions it moved (p_hooks of them: call again).
CREATE OR REPLACE FUNCTION switchboard.events_fanout(p_hooks int DEFAULT NULL) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_bound xid8 := pg_snapshot_xmin(pg_current_snapshot());
    v_ids   text[] := '{}'::text[];
    v_lapsed text[];
    g       record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM switchboard.event_hooks)
       OR NOT pg_try_advisory_xact_lock(hashtext('switchboard.events_fanout')) THEN
        RETURN 0;
    END IF;
    -- Only subscriptions with something after their position: one probe per kind first.
    FOR g IN
        WITH h AS (
            SELECT x.id, x.name, x.endpoint_id, x.arguments, x.pos_xact, x.pos_seq,
                   s.queues, s.human_id, s.queue, s.webhook_id
              FROM switchboard.event_hooks x
              JOIN switchboard.endpoints e ON e.id = x.endpoint_id AND e.state = 'active'
              CROSS JOIN LATERAL (SELECT a.owner_human_id AS human_id, e.queues,
                                         x.arguments ->> 'queue' AS queue,
                                         switchboard.as_uuid(x.arguments ->> 'webhook_id') AS webhook_id
                                    FROM switchboard.agents a WHERE a.id = e.agent_id) s
             WHERE x.refresh_before > now() AND (x.pos_xact, x.pos_seq) < (v_bound, 0::bigint)
               -- a gap envelope still to send goes first (control rows have no position)
               AND NOT EXISTS (SELECT 1 FROM switchboard.event_outbox o WHERE o.hook_id = x.id AND o.xact IS NULL)
               AND CASE x.name
                     WHEN 'todo.claimable' THEN EXISTS (
                         SELECT 1 FROM switchboard.event_log l
                          WHERE l.endpoint_id = x.endpoint_id AND (l.xact, l.seq) > (x.pos_xact, x.pos_seq)
                            AND l.xact < v_bound)
                     ELSE EXISTS (
                         SELECT 1 FROM switchboard.webhook_events ev
                          WHERE ev.xact IS NOT NULL AND (ev.xact, ev.id) > (x.pos_xact, x.pos_seq) AND ev.xact < v_bound)
                   END
             LIMIT p_hooks
               FOR UPDATE OF x SKIP LOCKED)
        SELECT h.name, h.endpoint_id, h.queues, h.human_id, h.queue, h.webhook_id,
               (array_agg(h.pos_xact ORDER BY h.pos_xact, h.pos_seq))[1] AS pos_xact,
               (array_agg(h.pos_seq ORDER BY h.pos_xact, h.pos_seq))[1] AS pos_seq,
               array_agg(h.id ORDER BY h.id) AS ids,
               array_agg(h.pos_xact ORDER BY h.id) AS xs,
               array_agg(h.pos_seq ORDER BY h.id) AS ss
          FROM h
         GROUP BY h.name, h.endpoint_id, h.arguments, h.queues, h.human_id, h.queue, h.webhook_id
    LOOP
        -- One row per event for the whole group (its members in hook_ids; the take expands
        -- it), in event order. A lone subscription gets a row of its own. hook_id is the
        -- group's key: the unique (hook_id, message_id) refuses the same event for the same
        -- group twice (the lock and the positions already prevent a second fan-out).
        -- A group row has at most events_group_max() members (a take is that many POSTs).
        INSERT INTO switchboard.event_outbox (hook_id, hook_ids, message_id, xact, seq, body)
        SELECT CASE WHEN cardinality(p.ids) = 1 THEN p.ids[1]
                    ELSE 'grp_' || md5(array_to_string(p.ids, ',')) END,
               CASE WHEN cardinality(p.ids) > 1 THEN p.ids END,
               r.event_id, r.xact, r.seq,
               jsonb_build_object('eventId', r.event_id, 'name', g.name,
                                  'timestamp', switchboard.rfc3339(r.occurred_at), 'data', r.data)
          FROM switchboard.events_read(g.name, g.endpoint_id, g.queues, g.human_id, g.queue, g.webhook_id,
                                       g.pos_xact, g.pos_seq, v_bound, NULL, 10000) r
         -- an event's members: those whose position is before it, in id order (OFFSET 0: the
         -- array is built once per event, not at every use below)
         CROSS JOIN LATERAL (
             SELECT ARRAY(SELECT m.id FROM unnest(g.ids, g.xs, g.ss) WITH ORDINALITY AS m(id, x, s, n)
                           WHERE (m.x, m.s) < (r.xact, r.seq) ORDER BY m.n) AS ids
             OFFSET 0) e
         CROSS JOIN LATERAL (
             SELECT e.ids[k * switchboard.events_group_max() + 1 : (k + 1) * switchboard.events_group_max()] AS ids
               FROM generate_series(0, (cardinality(e.ids) - 1) / switchboard.events_group_max()) k) p
         ORDER BY r.xact, r.seq
        ON CONFLICT (hook_id, message_id) DO NOTHING;
        v_ids := v_ids || g.ids;
    END LOOP;
    UPDATE switchboard.event_hooks SET pos_xact = v_bound, pos_seq = 0 WHERE id = ANY (v_ids);
    -- Lapsed subscriptions (an hour past refreshBefore) and their outbox go.
    WITH lapsed AS (DELETE FROM switchboard.event_hooks x WHERE x.refresh_before < now() - interval '1 hour'
                    RETURNING x.id)
    SELECT array_agg(lapsed.id) INTO v_lapsed FROM lapsed;
    IF v_lapsed IS NOT NULL THEN
        DELETE FROM switchboard.event_outbox o WHERE o.hook_id = ANY (v_lapsed);
        PERFORM switchboard.events_outbox_leave(v_lapsed);
    END IF;
    -- Retention of the log, in a bounded batch.
    DELETE FROM switchboard.event_log l
     WHERE (l.xact, l.seq) IN (SELECT o.xact, o.seq FROM switchboard.event_log o
                                WHERE o.occurred_at < now() - make_interval(days => switchboard.setting('retain_events_days')::int)
                                LIMIT 1000);
    DELETE FROM switchboard.event_interest
     WHERE seen_at < now() - make_interval(days => switchboard.setting('retain_events_days')::int);
    RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION switchboard.events_fanout(int) IS
  'MCP Events tick: copy new occurrences of live webhook subscriptions (up to p_hooks of them) into the outbox; drop lapsed subscriptions and expired log rows. Answers the subscriptions moved.';

-- Sending: take due outbox rows, up to p_limit POSTs (a group row is one POST per member;
-- at least one row, so at most the larger of p_limit and events_group_max()), of active subscriptions (FOR UPDATE SKIP LOCKED, so replicas never take
-- the same row), lease them (leased_until, in no index: a HOT update) and count the attempt.
-- Each POST comes with what it needs (url and secrets of its subscription, joined now); body
-- has the member's watermark cursor (events). A group row's member that was suspended gets a
-- row of its own, which waits for the refresh as its other rows do; one that left is dropped.
CREATE OR REPLACE FUNCTION switchboard.events_outbox_take(p_limit int, p_lease_seconds int DEFAULT 30)
RETURNS TABLE (id bigint, hook_id text, url text, secrets text[], message_id text, body jsonb, attempts int)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[] := '{}'::bigint[];
    v_n   int := 0;
    r     record;
BEGIN
    FOR r IN SELECT d.id, coalesce(cardinality(d.hook_ids), 1) AS n
               FROM switchboard.event_outbox d
               LEFT JOIN switchboard.event_hooks x ON x.id = d.hook_id
              WHERE d.next_at <= now() AND (d.leased_until IS NULL OR d.leased_until <= now())
                AND (d.url IS NOT NULL OR x.active OR d.hook_ids IS NOT NULL)
              ORDER BY d.next_at
              LIMIT p_limit
                FOR UPDATE OF d SKIP LOCKED
    LOOP
        EXIT WHEN v_n > 0 AND v_n + r.n > p_limit; -- a group row that does not fit waits
        v_ids := v_ids || r.id;
        v_n := v_n + r.n;
        EXIT WHEN v_n >= p_limit;
    END LOOP;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    -- Members not active (rare): suspended ones get their own row, and all leave the group row.
    INSERT INTO switchboard.event_outbox (hook_id, message_id, xact, seq, body, created_at)
    SELECT m.hook, o.message_id, o.xact, o.seq, o.body, o.created_at
      FROM switchboard.event_outbox o
     CROSS JOIN unnest(o.hook_ids) AS m(hook)
      JOIN switchboard.event_hooks x ON x.id = m.hook AND NOT x.active
     WHERE o.id = ANY (v_ids) AND o.hook_ids IS NOT NULL
    ON CONFLICT (hook_id, message_id) DO NOTHING;
    UPDATE switchboard.event_outbox o
       SET hook_ids = ARRAY(SELECT m.hook FROM unnest(o.hook_ids) AS m(hook)
                              JOIN switchboard.event_hooks x ON x.id = m.hook AND x.active)
     WHERE o.id = ANY (v_ids) AND o.hook_ids IS NOT NULL
       AND EXISTS (SELECT 1 FROM unnest(o.hook_ids) AS m(hook)
                     LEFT JOIN switchboard.event_hooks x ON x.id = m.hook
                    WHERE x.active IS NOT TRUE);
    DELETE FROM switchboard.event_outbox o WHERE o.id = ANY (v_ids) AND o.hook_ids = '{}';

    RETURN QUERY
    WITH taken AS (
        UPDATE switchboard.event_outbox o
           SET leased_until = now() + make_interval(secs => p_lease_seconds), attempts = o.attempts + 1
         WHERE o.id = ANY (v_ids)
        RETURNING o.*)
    SELECT t.id, m.hook, coalesce(t.url, x.url),
           CASE WHEN t.secret IS NOT NULL THEN ARRAY[t.secret]
                WHEN x.previous_until > now() THEN ARRAY[x.secret, x.previous_secret]
                ELSE ARRAY[x.secret] END,
           t.message_id,
           CASE WHEN t.xact IS NULL THEN t.body ELSE t.body || jsonb_build_object('cursor', w.watermark) END,
           t.attempts
      FROM taken t
     CROSS JOIN LATERAL unnest(coalesce(t.hook_ids, ARRAY[t.hook_id])) AS m(hook)
      LEFT JOIN switchboard.event_hooks x ON x.id = m.hook
      LEFT JOIN LATERAL switchboard.events_watermark_at(x.id, x.name, x.pos_xact, x.pos_seq) w ON t.xact IS NOT NULL
     WHERE t.hook_ids IS NULL OR x.active
     ORDER BY t.id, m.hook;
END
$$;

-- The SEP's suspension rule, as it suggests: a failure rate above 95% over a rolling hour, with
-- at least 100 attempts in it (a blip does not suspend a healthy subscription, nor a handful of
-- failures a quiet one). The hour is estimated from hour-long buckets: the current one
-- (from tally_start) and the part of the one before it that is still inside the hour.
CREATE OR REPLACE FUNCTION switchboard.events_failing(h switchboard.event_hooks) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT a >= 100 AND f > 0.95 * a
      FROM (SELECT h.prior_attempts * w + h.tally_attempts AS a, h.prior_failures * w + h.tally_failures AS f
              FROM (SELECT greatest(0, 1 - extract(epoch FROM now() - h.tally_start) / 3600) AS w) x) y
$$;

-- Hour-long buckets a tally moves on by: 0 within the current one, 1 into the next, ...
CREATE OR REPLACE FUNCTION switchboard.events_tally_steps(p_start timestamptz) RETURNS int
LANGUAGE sql STABLE AS $$
    SELECT floor(extract(epoch FROM now() - p_start) / 3600)::int
$$;

-- Outcomes of POSTs per subscription: p_counts[i] deliveries to p_hooks[i], successes when
-- p_error is NULL, else failures of that category. Keeps deliveryStatus and the rolling hour's
-- tally, and suspends a subscription that fails the SEP's rule until its next refresh.
-- Set-based, one statement for a sender's whole batch of successes.
CREATE OR REPLACE FUNCTION switchboard.events_hooks_tally(p_hooks text[], p_counts int[], p_error text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE switchboard.event_hooks x
       SET tally_start = x.tally_start + make_interval(hours => switchboard.events_tally_steps(x.tally_start)),
           prior_attempts = CASE switchboard.events_tally_steps(x.tally_start)
                                 WHEN 0 THEN x.prior_attempts WHEN 1 THEN x.tally_attempts ELSE 0 END,
           prior_failures = CASE switchboard.events_tally_steps(x.tally_start)
                                 WHEN 0 THEN x.prior_failures WHEN 1 THEN x.tally_failures ELSE 0 END,
           tally_attempts = CASE WHEN switchboard.events_tally_steps(x.tally_start) = 0 THEN x.tally_attempts ELSE 0 END + t.n,
           tally_failures = CASE WHEN switchboard.events_tally_steps(x.tally_start) = 0 THEN x.tally_failures ELSE 0 END
                            + CASE WHEN p_error IS NULL THEN 0 ELSE t.n END,
           last_delivery_at = CASE WHEN p_error IS NULL THEN now() ELSE x.last_delivery_at END,
           last_error = p_error,
           failed_since = CASE WHEN p_error IS NULL THEN NULL ELSE coalesce(x.failed_since, now()) END,
           failures = CASE WHEN p_error IS NULL THEN 0 ELSE x.failures + t.n END
      FROM unnest(p_hooks, p_counts) AS t(hook_id, n)
     WHERE x.id = t.hook_id;
    IF p_error IS NOT NULL THEN
        UPDATE switchboard.event_hooks x SET active = false
         WHERE x.id = ANY (p_hooks) AND x.active AND switchboard.events_failing(x);
    END IF;
END
$$;
COMMENT ON FUNCTION switchboard.events_hooks_tally(text[], int[], text) IS
  'MCP Events: record webhook POST outcomes per subscription (deliveryStatus, the rolling hour''s tally); suspends at >95% failures over >=100 attempts in an hour.';

-- The outcome of one POST: ok (2xx), gone (410, 413: not retried, and the subscription is not
-- affected, as the SEP says), or a retryable failure with its category. Five attempts at most
-- (backoff 1 s, 5 s, 30 s, 3 min: under 4 minutes), then the event is abandoned (replay from a
-- cursor still has it). Suspension: events_hooks_tally.
CREATE OR REPLACE FUNCTION switchboard.events_outbox_done(p_id bigint, p_outcome text, p_error text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    o switchboard.event_outbox;
BEGIN
    SELECT * INTO o FROM switchboard.event_outbox WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_outcome = 'ok' THEN
        DELETE FROM switchboard.event_outbox WHERE id = p_id;
        PERFORM switchboard.events_hooks_tally(ARRAY[o.hook_id], ARRAY[1], NULL);
        RETURN;
    END IF;
    IF p_outcome = 'gone' OR o.attempts >= 5 THEN
        DELETE FROM switchboard.event_outbox WHERE id = p_id;
    ELSE
        UPDATE switchboard.event_outbox
           SET next_at = now() + (ARRAY[interval '1 second', interval '5 seconds', interval '30 seconds',
                                        interval '3 minutes'])[o.attempts],
               leased_until = NULL
         WHERE id = p_id;
    END IF;
    IF p_outcome <> 'gone' THEN
        PERFORM switchboard.events_hooks_tally(ARRAY[o.hook_id], ARRAY[1], coalesce(p_error, 'http_5xx'));
    END IF;
END
$$;

-- Many outcomes in one transaction (one commit for a sender's whole batch of POSTs):
-- p_outcomes[i] of the POST of row p_ids[i] to subscription p_hooks[i]. A group row's member
-- whose POST failed retryably gets a row of its own (its first retry's backoff; from then on
-- events_outbox_done, as any row); the group row goes once all its members have an outcome,
-- else it keeps the others (sent again after its lease: a server that died mid-batch).
CREATE OR REPLACE FUNCTION switchboard.events_outbox_done_posts(
    p_ids bigint[], p_hooks text[], p_outcomes text[], p_errors text[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_group  bigint[];
    v_hooks  text[];
    v_counts int[];
    f        record;
BEGIN
    v_group := ARRAY(SELECT o.id FROM switchboard.event_outbox o
                      WHERE o.id = ANY (p_ids) AND o.hook_ids IS NOT NULL ORDER BY o.id FOR UPDATE);
    IF v_group <> '{}' THEN
        INSERT INTO switchboard.event_outbox (hook_id, message_id, xact, seq, body, attempts, next_at, created_at)
        SELECT d.hook, o.message_id, o.xact, o.seq, o.body, o.attempts,
               now() + (ARRAY[interval '1 second', interval '5 seconds', interval '30 seconds',
                              interval '3 minutes'])[least(o.attempts, 4)],
               o.created_at
          FROM unnest(p_ids, p_hooks, p_outcomes) AS d(id, hook, outcome)
          JOIN switchboard.event_outbox o ON o.id = d.id AND o.hook_ids IS NOT NULL
          JOIN switchboard.event_hooks x ON x.id = d.hook
         WHERE d.outcome = 'retry' AND o.attempts < 5
        ON CONFLICT (hook_id, message_id) DO NOTHING;
        DELETE FROM switchboard.event_outbox o
         USING (SELECT d.id, array_agg(d.hook) AS hooks FROM unnest(p_ids, p_hooks) AS d(id, hook)
                 WHERE d.id = ANY (v_group) GROUP BY d.id) r
         WHERE o.id = r.id AND o.hook_ids <@ r.hooks;
        UPDATE switchboard.event_outbox o
           SET hook_ids = ARRAY(SELECT m FROM unnest(o.hook_ids) m WHERE NOT m = ANY (r.hooks))
          FROM (SELECT d.id, array_agg(d.hook) AS hooks FROM unnest(p_ids, p_hooks) AS d(id, hook)
                 WHERE d.id = ANY (v_group) GROUP BY d.id) r
         WHERE o.id = r.id AND o.hook_ids IS NOT NULL;
    END IF;
    -- Successes, the common case, set-based: each subscription's tally counts them (the
    -- failure rate needs the successes too) in one row write per batch.
    WITH gone AS (
        DELETE FROM switchboard.event_outbox o
         WHERE o.id = ANY (ARRAY(SELECT d.id FROM unnest(p_ids, p_outcomes) AS d(id, outcome)
                                  WHERE d.outcome = 'ok' AND NOT d.id = ANY (v_group)))
        RETURNING o.hook_id),
    ok AS (
        SELECT gone.hook_id FROM gone
        UNION ALL
        SELECT d.hook FROM unnest(p_ids, p_hooks, p_outcomes) AS d(id, hook, outcome)
         WHERE d.outcome = 'ok' AND d.id = ANY (v_group))
    SELECT array_agg(g.hook_id), array_agg(g.n) INTO v_hooks, v_counts
      FROM (SELECT ok.hook_id, count(*)::int AS n FROM ok GROUP BY ok.hook_id) g;
    PERFORM switchboard.events_hooks_tally(v_hooks, v_counts, NULL);
    FOR f IN SELECT d.id, d.hook, d.outcome, d.err
               FROM unnest(p_ids, p_hooks, p_outcomes, p_errors) AS d(id, hook, outcome, err)
              WHERE d.outcome <> 'ok'
    LOOP
        IF NOT f.id = ANY (v_group) THEN
            PERFORM switchboard.events_outbox_done(f.id, f.outcome, f.err);
        ELSIF f.outcome <> 'gone' AND f.hook IS NOT NULL THEN
            PERFORM switchboard.events_hooks_tally(ARRAY[f.hook], ARRAY[1], coalesce(f.err, 'http_5xx'));
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION switchboard.events_outbox_done_posts(bigint[], text[], text[], text[]) IS
  'Senders: the outcomes of a batch of POSTs (row, subscription, outcome, category), in one transaction; a group row''s failed members get rows of their own.';

-- The call of a released server, which passes no subscriptions: a group row's outcomes are
-- its members in the order the take answered them (by subscription id). Kept for a release
-- (expand, then contract: docs/sql.md).
CREATE OR REPLACE FUNCTION switchboard.events_outbox_done_many(p_ids bigint[], p_outcomes text[], p_errors text[])
RETURNS void
LANGUAGE sql AS $$
    SELECT switchboard.events_outbox_done_posts(p_ids, ARRAY(
               SELECT coalesce(o.hook_id, '') FROM (
                   SELECT d.id, d.i, row_number() OVER (PARTITION BY d.id ORDER BY d.i) AS k
                     FROM unnest(p_ids) WITH ORDINALITY AS d(id, i)) d
                 LEFT JOIN LATERAL (
                   SELECT CASE WHEN o.hook_ids IS NULL THEN o.hook_id
                               ELSE (SELECT m FROM unnest(o.hook_ids) m ORDER BY m OFFSET d.k - 1 LIMIT 1) END AS hook_id
                     FROM switchboard.event_outbox o WHERE o.id = d.id) o ON true
                ORDER BY d.i),
           p_outcomes, p_errors)
$$;
COMMENT ON FUNCTION switchboard.events_outbox_done_many(bigint[], text[], text[]) IS
  'Senders of the previous release: the outcomes of a batch of POSTs by row (a group row''s by member order), in one transaction.';

-- Ends webhook subscriptions: a signed terminated envelope each (the outbox row keeps its own
-- copy of url and secret, its hook is gone) and their pending events dropped.
CREATE OR REPLACE FUNCTION switchboard.events_end(p_hooks text[], p_reason text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    DELETE FROM switchboard.event_outbox o WHERE o.hook_id = ANY (p_hooks);
    PERFORM switchboard.events_outbox_leave(p_hooks);
    WITH gone AS (DELETE FROM switchboard.event_hooks x WHERE x.id = ANY (p_hooks) RETURNING x.*)
    INSERT INTO switchboard.event_outbox (hook_id, message_id, body, url, secret)
    SELECT g.id, 'msg_terminated_' || replace(gen_random_uuid()::text, '-', ''),
           jsonb_build_object('type', 'terminated', 'error', jsonb_build_object(
               'code', -32024, 'message', 'Forbidden', 'data', jsonb_build_object('reason', p_reason))),
           g.url, g.secret
      FROM gone g;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION switchboard.events_end(text[], text) IS
  'End webhook subscriptions: a signed terminated envelope each, pending events dropped.';

-- The endpoint was revoked or its credential rotated. Called by endpoint_revoke and
-- endpoint_rotate.
CREATE OR REPLACE FUNCTION switchboard.events_terminate(p_endpoint uuid, p_reason text) RETURNS int
LANGUAGE sql AS $$
    SELECT switchboard.events_end(ARRAY(SELECT x.id FROM switchboard.event_hooks x WHERE x.endpoint_id = p_endpoint), p_reason)
$$;
COMMENT ON FUNCTION switchboard.events_terminate(uuid, text) IS
  'End an endpoint''s webhook subscriptions (revocation, rotation): a signed terminated envelope each, pending events dropped.';

-- OAuth grants were revoked: the subscriptions made (or last refreshed) with their tokens end.
-- Called by oauth_grants_revoke.
CREATE OR REPLACE FUNCTION switchboard.events_terminate_grants(p_grants uuid[], p_reason text) RETURNS int
LANGUAGE sql AS $$
    SELECT switchboard.events_end(ARRAY(SELECT x.id FROM switchboard.event_hooks x WHERE x.grant_id = ANY (p_grants)), p_reason)
$$;
COMMENT ON FUNCTION switchboard.events_terminate_grants(uuid[], text) IS
  'End the webhook subscriptions made with revoked OAuth grants: a signed terminated envelope each.';

-- Metrics (switchboard_events_outbox_oldest_seconds, read at scrape time): the age of the oldest
-- row still in the outbox, sent or not, in seconds; 0 when it is empty.
CREATE OR REPLACE FUNCTION switchboard.events_outbox_age() RETURNS double precision
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT extract(epoch FROM now() - min(o.created_at))::double precision
                       FROM switchboard.event_outbox o), 0);
END
$$;
COMMENT ON FUNCTION switchboard.events_outbox_age() IS
  'Age in seconds of the oldest MCP Events outbox row (0 when empty), for the metrics gauge.';

-- Operators: subscriptions without their secrets (switchboard events list, the DBA view).
CREATE OR REPLACE FUNCTION switchboard.events_hooks_list(p_endpoint uuid DEFAULT NULL) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'id', x.id, 'endpoint_id', x.endpoint_id, 'name', x.name, 'arguments', x.arguments, 'url', x.url,
               'refresh_before', switchboard.rfc3339(x.refresh_before), 'active', x.active,
               'last_error', x.last_error) ORDER BY x.created_at, x.id), '[]')
      FROM switchboard.event_hooks x
     WHERE p_endpoint IS NULL OR x.endpoint_id = p_endpoint
$$;

-- DBA view: webhook subscriptions without their secrets.
CREATE OR REPLACE VIEW switchboard.event_subscriptions AS
SELECT x.id, x.endpoint_id, e.slug, x.name, x.arguments, x.url, x.refresh_before, x.active,
       x.last_delivery_at, x.last_error, x.failed_since, x.failures,
       (SELECT count(*) FROM switchboard.event_outbox o
         WHERE o.hook_id = x.id OR o.hook_ids @> ARRAY[x.id] AND o.hook_ids IS NOT NULL) AS outbox,
       (SELECT now() - min(o.created_at) FROM switchboard.event_outbox o
         WHERE o.hook_id = x.id OR o.hook_ids @> ARRAY[x.id] AND o.hook_ids IS NOT NULL) AS oldest_age,
       x.created_at, x.refreshed_at
  FROM switchboard.event_hooks x
  JOIN switchboard.endpoints e ON e.id = x.endpoint_id;
COMMENT ON VIEW switchboard.event_subscriptions IS
  'MCP Events webhook subscriptions (no secrets), with their outbox backlog and its age.';
COMMENT ON FUNCTION switchboard.events_verb(text) IS
  'The allowlist verb an event type needs (todo.claimable: list_todos; webhook.delivery: list_webhook_events); NULL for an unknown type.';
COMMENT ON FUNCTION switchboard.events_payload_max() IS
  'Largest payload (bytes) an event''s data carries; larger ones say payload_omitted.';
COMMENT ON FUNCTION switchboard.events_scope(uuid, text, jsonb) IS
  'Checks an event type and its arguments against the endpoint''s grant; refuses not_found, forbidden or invalid_argument.';
COMMENT ON FUNCTION switchboard.events_cursor(text, xid8, bigint, timestamptz) IS
  'An opaque cursor: the position (xact, seq) of an event type and the time it stood for, base64url.';
COMMENT ON FUNCTION switchboard.events_cursor_parse(text, text) IS
  'The parts of a cursor minted for p_name; invalid_argument otherwise.';
COMMENT ON FUNCTION switchboard.events_read(text, uuid, text[], uuid, text, uuid, xid8, bigint, xid8, timestamptz, int) IS
  'Occurrences of one subscription after a position and below a bound (xact), in order, within the given scope.';
COMMENT ON FUNCTION switchboard.events_touch(uuid) IS
  'Marks an endpoint as using events, so the recorder writes its todo.claimable (one write a minute at most).';
COMMENT ON FUNCTION switchboard.events_todo_id(switchboard.todos) IS
  'The stable eventId of a todo''s claimability: todo, attempt, and the moment for a redriven todo.';
COMMENT ON FUNCTION switchboard.events_hook_id(uuid, text, text, jsonb) IS
  'The derived subscription id over (endpoint, url, name, arguments).';
COMMENT ON FUNCTION switchboard.events_watermark_at(text, text, xid8, bigint) IS
  'Safe-to-persist cursor of a subscription given its id, event type and fan-out position (one row; inlined into a join).';
COMMENT ON FUNCTION switchboard.events_watermark(switchboard.event_hooks) IS
  'Safe-to-persist cursor of a subscription: before its oldest event still in the outbox, else its fan-out position.';
COMMENT ON FUNCTION switchboard.events_delivery_status(switchboard.event_hooks) IS
  'The SEP''s deliveryStatus of a subscription (lastError as a category only).';
COMMENT ON FUNCTION switchboard.events_unsubscribe(uuid, text, jsonb, text) IS
  'events/unsubscribe: delete the subscription with this key and its outbox; not_found when none.';
COMMENT ON FUNCTION switchboard.events_outbox_take(int, int) IS
  'Senders: take due outbox rows up to p_limit POSTs (FOR UPDATE SKIP LOCKED), lease them and count the attempt; one row per POST (a group row''s active members each) with url, secrets and the body with its watermark.';
COMMENT ON FUNCTION switchboard.events_outbox_done(bigint, text, text) IS
  'Senders: the outcome of one POST (ok, gone, retry + category); backoff, abandon after 5 attempts; the subscription''s tally (events_hooks_tally).';
COMMENT ON FUNCTION switchboard.events_failing(switchboard.event_hooks) IS
  'The SEP''s suspension rule for a subscription: over 95% of at least 100 attempts failed in the rolling hour (estimated from two hour-long buckets).';
COMMENT ON FUNCTION switchboard.events_tally_steps(timestamptz) IS
  'How many hour-long buckets a subscription''s tally moves on by since p_start.';
COMMENT ON FUNCTION switchboard.events_hooks_list(uuid) IS
  'Operators: webhook subscriptions without secrets (switchboard events list).';
