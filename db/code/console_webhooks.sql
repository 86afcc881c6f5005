-- The console's webhooks (issue 36): the human's webhooks with their refusals, the delivery log,
-- the provider-issued secret and the rules. As in console_queues.sql, every function takes the
-- human and whether they are an operator; another human's webhook or delivery, a malformed id
-- and an unknown id are one identical not_found. The secret goes in through the same function as
-- `switchboard webhook set-secret` and never comes out.

-- A live webhook the human sees, or not_found.
CREATE OR REPLACE FUNCTION switchboard.console_webhook_row(p_human uuid, p_operator boolean, p_webhook text)
RETURNS switchboard.webhooks
LANGUAGE plpgsql STABLE AS $$
DECLARE
    w switchboard.webhooks;
BEGIN
    SELECT wh.* INTO w
      FROM switchboard.webhooks wh
      JOIN switchboard.console_endpoints(p_human, p_operator) e ON e.id = wh.endpoint_id
     WHERE wh.id = switchboard.as_uuid(p_webhook) AND wh.deleted_at IS NULL;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'webhook not found');
    END IF;
    RETURN w;
END
$$;
COMMENT ON FUNCTION switchboard.console_webhook_row(uuid, boolean, text) IS
  'The live webhook p_webhook if the human sees it; one identical not_found otherwise.';

-- A webhook as the console shows it: webhook_json (refusals included, never a secret), the
-- ingest token (the server makes the ingest URL of it, which the human pastes into the
-- provider), who issues its secret, and its endpoint.
CREATE OR REPLACE FUNCTION switchboard.console_webhook_json(w switchboard.webhooks, p_slug text, p_human text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT switchboard.webhook_json(w) || jsonb_strip_nulls(jsonb_build_object(
        'endpoint_id', w.endpoint_id, 'endpoint', p_slug, 'human', p_human,
        'secret_issuer', switchboard.secret_issuer(w.source_type),
        'last_delivery_at', (SELECT switchboard.rfc3339(ev.received_at) FROM switchboard.webhook_events ev
                              WHERE ev.webhook_id = w.id ORDER BY ev.id DESC LIMIT 1)))
$$;
COMMENT ON FUNCTION switchboard.console_webhook_json(switchboard.webhooks, text, text) IS
  'webhook_json with the ingest token, secret issuer, endpoint and last delivery time; never a secret.';

CREATE OR REPLACE FUNCTION switchboard.console_webhooks(p_human uuid, p_operator boolean) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(switchboard.console_webhook_json(w, e.slug, e.human)
                              ORDER BY e.human, w.created_at, w.id), '[]')
      FROM switchboard.webhooks w
      JOIN switchboard.console_endpoints(p_human, p_operator) e ON e.id = w.endpoint_id
     WHERE w.deleted_at IS NULL
$$;
COMMENT ON FUNCTION switchboard.console_webhooks(uuid, boolean) IS
  'The live webhooks of the human''s endpoints (all for an operator), with refusals; never a secret.';

-- One webhook with its rules (rules_json: the list, default action, params, version, grant).
CREATE OR REPLACE FUNCTION switchboard.console_webhook(p_human uuid, p_operator boolean, p_webhook text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    w switchboard.webhooks := switchboard.console_webhook_row(p_human, p_operator, p_webhook);
BEGIN
    RETURN (SELECT switchboard.console_webhook_json(w, e.slug, e.human)
                   || jsonb_build_object('rules', switchboard.rules_json(w))
              FROM switchboard.console_endpoints(p_human, p_operator) e
             WHERE e.id = w.endpoint_id);
END
$$;
COMMENT ON FUNCTION switchboard.console_webhook(uuid, boolean, text) IS
  'One webhook the human sees, with its rules; not_found otherwise.';

-- What a person calls the disposition of a stored delivery.
CREATE OR REPLACE FUNCTION switchboard.console_disposition(p_disposition text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_disposition WHEN 'delivered' THEN 'accepted' WHEN 'dropped' THEN 'dropped by rule'
                              WHEN 'faulted' THEN 'dropped: rule fault' ELSE p_disposition END
$$;
COMMENT ON FUNCTION switchboard.console_disposition(text) IS
  'accepted, dropped by rule, dropped: rule fault, handshake.';

-- A delivery in the log: event_json, its disposition in words, the redeliveries it absorbed, and
-- the todos it made that the human sees (others: only counted).
CREATE OR REPLACE FUNCTION switchboard.console_delivery_json(ev switchboard.webhook_events, p_eps uuid[], p_detail boolean)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT switchboard.event_json(ev, p_detail) || jsonb_build_object(
        'outcome', switchboard.console_disposition(ev.disposition),
        'duplicates', ev.duplicates,
        'last_duplicate_at', switchboard.rfc3339(ev.last_duplicate_at),
        'todos', coalesce((SELECT jsonb_agg(jsonb_build_object('id', t.id, 'state', switchboard.console_state(t),
                                                               'queue', t.queue) ORDER BY t.created_at, t.id)
                             FROM switchboard.todos t
                            WHERE t.event_id = ev.id AND t.endpoint_id = ANY (p_eps)), '[]'),
        'other_todos', (SELECT count(*) FROM switchboard.todos t
                         WHERE t.event_id = ev.id AND NOT t.endpoint_id = ANY (p_eps)))
$$;
COMMENT ON FUNCTION switchboard.console_delivery_json(switchboard.webhook_events, uuid[], boolean) IS
  'A stored delivery for the console log: event_json, outcome, duplicates, the human''s todos it made and a count of the others.';

-- The delivery log of one webhook, newest first, a page at a time (p_before_id: the last id of
-- the previous page). Refused deliveries are not stored (no body is kept of them): their counts
-- and the last one are in the webhook (refusals).
CREATE OR REPLACE FUNCTION switchboard.console_deliveries(
    p_human uuid, p_operator boolean, p_webhook text, p_before_id bigint DEFAULT NULL, p_limit int DEFAULT 50)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    w switchboard.webhooks := switchboard.console_webhook_row(p_human, p_operator, p_webhook);
    v_limit int := greatest(1, least(coalesce(p_limit, 50), 200));
    v_eps uuid[] := ARRAY(SELECT e.id FROM switchboard.console_endpoints(p_human, p_operator) e);
    v_rows jsonb;
    v_n int;
BEGIN
    SELECT coalesce(jsonb_agg(switchboard.console_delivery_json(ev, v_eps, false) ORDER BY ev.id DESC), '[]'),
           count(*)
      INTO v_rows, v_n
      FROM (SELECT * FROM switchboard.webhook_events x
             WHERE x.webhook_id = w.id AND (p_before_id IS NULL OR x.id < p_before_id)
             ORDER BY x.id DESC
             LIMIT v_limit + 1) ev;
    IF v_n > v_limit THEN
        v_rows := v_rows - v_limit;
        RETURN jsonb_build_object('deliveries', v_rows, 'next', v_rows -> (v_limit - 1) -> 'id');
    END IF;
    RETURN jsonb_build_object('deliveries', v_rows, 'next', NULL);
END
$$;
COMMENT ON FUNCTION switchboard.console_deliveries(uuid, boolean, text, bigint, int) IS
  'Newest-first stored deliveries of a webhook the human sees (not_found otherwise), with the todos each made; next: the id to page before, or null.';

-- One stored delivery of a webhook the human sees, with headers, payload and routing (for the
-- rules' dry run); not_found for another webhook's, an unknown or a malformed id.
CREATE OR REPLACE FUNCTION switchboard.console_delivery(
    p_human uuid, p_operator boolean, p_webhook text, p_event text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_eps uuid[] := ARRAY(SELECT e.id FROM switchboard.console_endpoints(p_human, p_operator) e);
    v_out jsonb;
BEGIN
    IF p_event ~ '^[0-9]{1,18}$' THEN
        SELECT switchboard.console_delivery_json(ev, v_eps, true) INTO v_out
          FROM switchboard.webhook_events ev
          JOIN switchboard.webhooks w ON w.id = ev.webhook_id AND w.deleted_at IS NULL
         WHERE ev.id = p_event::bigint AND w.id = switchboard.as_uuid(p_webhook) AND w.endpoint_id = ANY (v_eps);
    END IF;
    IF v_out IS NULL THEN
        PERFORM switchboard.refuse('not_found', 'delivery not found');
    END IF;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION switchboard.console_delivery(uuid, boolean, text, text) IS
  'One stored delivery (headers, payload, routing, todos) of a webhook the human sees; not_found otherwise.';

-- The provider-issued secret, from the console's password field: not_found unless the human
-- sees the webhook, then switchboard.webhook_set_secret, the function `switchboard webhook
-- set-secret` calls (its shape check, its previous-secret window, its answer without a secret).
CREATE OR REPLACE FUNCTION switchboard.console_webhook_set_secret(
    p_human uuid, p_operator boolean, p_webhook text, p_secret text, p_previous_ttl interval DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks := switchboard.console_webhook_row(p_human, p_operator, p_webhook);
BEGIN
    RETURN switchboard.webhook_set_secret(w.id::text, p_secret, p_previous_ttl);
END
$$;
COMMENT ON FUNCTION switchboard.console_webhook_set_secret(uuid, boolean, text, text, interval) IS
  'Put a provider-issued secret in force on a webhook the human sees (webhook_set_secret); not_found otherwise. Never returns a secret.';

-- A redelivery stores nothing new: its stored delivery counts it (the console's log shows it).
CREATE OR REPLACE FUNCTION switchboard.count_duplicate(p_event bigint) RETURNS void
LANGUAGE sql AS $$
    UPDATE switchboard.webhook_events SET duplicates = duplicates + 1, last_duplicate_at = now() WHERE id = p_event
$$;
COMMENT ON FUNCTION switchboard.count_duplicate(bigint) IS
  'Count a redelivery of a stored delivery (duplicates, last_duplicate_at).';
