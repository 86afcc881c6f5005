-- Routing rules and event history.
--
-- jq parsing and evaluation happen in the server (gojq); what a rule may name is decided here.

-- What a webhook's rules may name: queues (its target queue plus the owning endpoint's allowed
-- webhook queues) and endpoints (its live delivery targets). Validation and delivery share it.
CREATE OR REPLACE FUNCTION switchboard.webhook_grant(p_webhook uuid) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'queues', (SELECT to_jsonb(array_agg(DISTINCT q ORDER BY q))
                     FROM unnest(array_append(e.webhook_queues, w.target_queue)) q),
        'endpoints', coalesce((SELECT jsonb_agg(t.endpoint_id ORDER BY t.ord)
                                 FROM switchboard.webhook_targets(w.id) t), '[]'))
      FROM switchboard.webhooks w
      JOIN switchboard.endpoints e ON e.id = w.endpoint_id
     WHERE w.id = p_webhook
$$;
COMMENT ON FUNCTION switchboard.webhook_grant(uuid) IS
  'Queues and endpoints the rules of a webhook may name: target queue + owner''s webhook queues; live delivery targets.';

CREATE OR REPLACE FUNCTION switchboard.rules_json(w switchboard.webhooks) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
               'webhook_id', w.id,
               'target_queue', w.target_queue,
               'default_action', w.default_action,
               'version', w.rules_version))
        || jsonb_build_object('rules', w.rules, 'params', w.rule_params,
                              'grant', switchboard.webhook_grant(w.id))
$$;
COMMENT ON FUNCTION switchboard.rules_json(switchboard.webhooks) IS 'The rule list of a webhook with its grant.';

CREATE OR REPLACE FUNCTION switchboard.rules_get(p_endpoint uuid, p_webhook text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN switchboard.rules_json(switchboard.owned_webhook(p_endpoint, p_webhook));
END
$$;
COMMENT ON FUNCTION switchboard.rules_get(uuid, text) IS 'The rules of a webhook the caller''s human owns.';

-- Save a whole (already parsed and compiled) rule list. Every action is checked against the grant;
-- any refusal leaves the previous list in force. p_expected_version makes edits compare-and-swap:
-- a list changed since the caller read it is a conflict. p_params NULL keeps the stored params.
CREATE OR REPLACE FUNCTION switchboard.rules_save(
    p_endpoint uuid, p_webhook text, p_rules jsonb, p_default_action jsonb, p_params jsonb,
    p_expected_version bigint DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks := switchboard.owned_webhook(p_endpoint, p_webhook);
    v_grant jsonb;
    v_action jsonb;
BEGIN
    SELECT * INTO w FROM switchboard.webhooks WHERE id = w.id FOR UPDATE;
    IF p_expected_version IS NOT NULL AND w.rules_version <> p_expected_version THEN
        PERFORM switchboard.refuse('conflict', 'rules changed concurrently; read them again');
    END IF;
    IF jsonb_typeof(p_rules) IS DISTINCT FROM 'array' THEN
        PERFORM switchboard.refuse('invalid_rule', 'rules must be an array');
    ELSIF jsonb_array_length(p_rules) > 32 THEN
        PERFORM switchboard.refuse('too_many_rules', 'at most 32 rules');
    ELSIF p_params IS NOT NULL AND (jsonb_typeof(p_params) <> 'object' OR octet_length(p_params::text) > 16384) THEN
        PERFORM switchboard.refuse('invalid_params', 'params must be a JSON object of at most 16 KiB');
    END IF;

    v_grant := switchboard.webhook_grant(w.id);
    FOR v_action IN
        SELECT r -> 'action' FROM jsonb_array_elements(p_rules) r
        UNION ALL
        SELECT p_default_action WHERE p_default_action IS NOT NULL
    LOOP
        IF v_action ? 'queue' AND NOT (v_grant -> 'queues') ? (v_action ->> 'queue') THEN
            PERFORM switchboard.refuse('forbidden', 'a rule names a queue outside the webhook grant');
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_array_elements_text(coalesce(v_action -> 'endpoints', '[]')) ep
                    WHERE NOT (v_grant -> 'endpoints') ? lower(ep)) THEN
            PERFORM switchboard.refuse('forbidden', 'a rule names an endpoint outside the delivery targets');
        END IF;
    END LOOP;

    UPDATE switchboard.webhooks
       SET rules = p_rules, default_action = p_default_action,
           rule_params = coalesce(p_params, rule_params), rules_version = rules_version + 1
     WHERE id = w.id
    RETURNING * INTO w;
    RETURN switchboard.rules_json(w);
END
$$;
COMMENT ON FUNCTION switchboard.rules_save(uuid, text, jsonb, jsonb, jsonb, bigint) IS
  'Replace the rule list of an owned webhook after checking every action against the grant (row-locked; optional compare-and-swap on version).';

CREATE OR REPLACE FUNCTION switchboard.event_json(ev switchboard.webhook_events, p_detail boolean DEFAULT false) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', ev.id,
        'webhook_id', ev.webhook_id,
        'source', ev.source,
        'event_type', ev.event_type,
        'trust_mode', ev.trust_mode,
        'verified', ev.verified,
        'disposition', ev.disposition,
        'payload_size', ev.payload_size,
        'received_at', switchboard.rfc3339(ev.received_at))
    || CASE WHEN p_detail
            THEN jsonb_build_object('verify_detail', ev.verify_detail, 'content_type', ev.content_type,
                                    'headers', ev.headers, 'payload', ev.payload, 'routing', ev.routing)
            ELSE '{}'::jsonb END
$$;
COMMENT ON FUNCTION switchboard.event_json(switchboard.webhook_events, boolean) IS
  'An event as agents see it; detail adds sanitized headers, payload and routing trace.';

-- Returns json, not jsonb, for the reason list_todos does (db/code/queue.sql).
CREATE OR REPLACE FUNCTION switchboard.events_list(
    p_endpoint uuid, p_webhook text DEFAULT NULL, p_limit int DEFAULT 50, p_before_id bigint DEFAULT NULL)
RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_human uuid := (switchboard.caller(p_endpoint)).human_id;
    v_webhook uuid;
BEGIN
    IF p_webhook IS NOT NULL THEN
        v_webhook := (switchboard.owned_webhook(p_endpoint, p_webhook)).id;
    END IF;
    RETURN json_build_object('events', coalesce(
        (SELECT json_agg(switchboard.event_json(ev) ORDER BY ev.id DESC)
           FROM (SELECT ev.*
                   FROM switchboard.webhook_events ev
                   JOIN switchboard.webhooks w ON w.id = ev.webhook_id
                   JOIN switchboard.endpoints e ON e.id = w.endpoint_id
                   JOIN switchboard.agents a ON a.id = e.agent_id
                  WHERE a.owner_human_id = v_human
                    AND (v_webhook IS NULL OR ev.webhook_id = v_webhook)
                    AND (p_before_id IS NULL OR ev.id < p_before_id)
                  ORDER BY ev.id DESC
                  LIMIT greatest(1, least(coalesce(p_limit, 50), 200))) ev),
        '[]'));
END
$$;
COMMENT ON FUNCTION switchboard.events_list(uuid, text, int, bigint) IS
  'Newest-first events of webhooks the caller''s human owns (optionally one webhook; before_id pages).';

-- One event of a webhook the caller's human owns; with p_webhook, it must belong to that webhook.
CREATE OR REPLACE FUNCTION switchboard.event_get(p_endpoint uuid, p_event text, p_webhook text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_human uuid := (switchboard.caller(p_endpoint)).human_id;
    ev switchboard.webhook_events;
BEGIN
    IF p_event ~ '^[0-9]{1,18}$' THEN
        SELECT x.* INTO ev
          FROM switchboard.webhook_events x
          JOIN switchboard.webhooks w ON w.id = x.webhook_id
          JOIN switchboard.endpoints e ON e.id = w.endpoint_id
          JOIN switchboard.agents a ON a.id = e.agent_id
         WHERE x.id = p_event::bigint AND a.owner_human_id = v_human
           AND (p_webhook IS NULL OR x.webhook_id::text = lower(p_webhook));
    END IF;
    IF ev.id IS NULL THEN
        PERFORM switchboard.refuse('not_found', 'event not found');
    END IF;
    RETURN switchboard.event_json(ev, true);
END
$$;
COMMENT ON FUNCTION switchboard.event_get(uuid, text, text) IS
  'One event (with headers, payload, routing) of a webhook the caller''s human owns; not_found otherwise.';
