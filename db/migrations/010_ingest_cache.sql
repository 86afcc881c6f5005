-- The receiver keeps the webhooks it has read (server/ingest, hookCache), which saves a lookup
-- round trip per delivery. The cache is never trusted on its own: ingest() takes the token and
-- the rules version the receiver used and refuses, in the delivery's own transaction, a token
-- that was rotated or deleted (not_found: the receiver forgets it and answers 404) or rules saved
-- since (stale: the receiver reads the webhook again and re-routes). So "the old URL stops working
-- at once" and "new rules apply to the next delivery" hold without any notification.

INSERT INTO switchboard.error_codes (code, sqlstate, meaning) VALUES
    ('stale', 'SB412', 'the receiver routed a delivery with rules that changed since; it reads them again (never on the wire)');

DROP FUNCTION switchboard.ingest(uuid, text, text, boolean, text, text, int, jsonb, jsonb, text, text, jsonb, text, uuid[]);
CREATE FUNCTION switchboard.ingest(
    p_webhook       uuid,
    p_delivery_key  text,
    p_event_type    text,
    p_verified      boolean,
    p_verify_detail text,
    p_content_type  text,
    p_payload_size  int,
    p_payload       jsonb,
    p_headers       jsonb,
    p_title         text,
    p_disposition   text,
    p_routing       jsonb,
    p_queue         text DEFAULT NULL,
    p_endpoints     uuid[] DEFAULT NULL,
    p_ingest_token  text DEFAULT NULL,
    p_rules_version bigint DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks;
    v_event bigint;
    v_targets uuid[];
    v_queue text;
    v_todos jsonb := '[]'::jsonb;
    v_created int := 0;
    r record;
BEGIN
    SELECT * INTO w FROM switchboard.webhooks
     WHERE id = p_webhook AND deleted_at IS NULL AND (p_ingest_token IS NULL OR ingest_token = p_ingest_token);
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'webhook not found');
    ELSIF w.rules_version <> p_rules_version THEN
        PERFORM switchboard.refuse('stale', 'the webhook''s rules changed since it was read');
    END IF;
    v_queue := coalesce(p_queue, w.target_queue);

    IF p_disposition = 'delivered' THEN
        SELECT array_agg(t.endpoint_id ORDER BY t.ord) INTO v_targets
          FROM switchboard.webhook_targets(p_webhook) t
         WHERE p_endpoints IS NULL OR t.endpoint_id = ANY (p_endpoints);
        -- A rule narrowed the delivery to endpoints that are no longer targets (route removed,
        -- friendship revoked): the rule decided, so the event is kept as dropped, with the reason,
        -- rather than refused forever.
        IF v_targets IS NULL AND p_endpoints IS NOT NULL
           AND EXISTS (SELECT 1 FROM switchboard.webhook_targets(p_webhook)) THEN
            p_disposition := 'dropped';
            p_routing := coalesce(p_routing, '{}') || '{"cause": "no live target among the rule''s endpoints"}';
        END IF;
    END IF;

    -- A concurrent identical delivery waits on the unique key, then finds the winner's event.
    FOR i IN 1..2 LOOP
        SELECT id INTO v_event FROM switchboard.webhook_events
         WHERE webhook_id = p_webhook AND delivery_key = p_delivery_key;
        IF FOUND THEN
            RETURN switchboard.redelivery(w, v_event);
        END IF;
        IF p_disposition = 'delivered' AND v_targets IS NULL THEN
            PERFORM switchboard.refuse('no_targets', 'webhook has no live delivery target');
        END IF;
        INSERT INTO switchboard.webhook_events (webhook_id, source, event_type, trust_mode, verified,
                                                verify_detail, content_type, payload_size, payload, headers,
                                                delivery_key, disposition, routing)
        VALUES (p_webhook, w.source_type, p_event_type, w.trust_mode, p_verified AND w.trust_mode = 'signed',
                p_verify_detail, p_content_type, p_payload_size, p_payload, coalesce(p_headers, '{}'),
                p_delivery_key, p_disposition, p_routing)
        ON CONFLICT (webhook_id, delivery_key) DO NOTHING
        RETURNING id INTO v_event;
        EXIT WHEN FOUND;
    END LOOP;

    FOR r IN SELECT x.target, c.todo_id, c.created
               FROM unnest(v_targets) WITH ORDINALITY AS x (target, ord)
              CROSS JOIN LATERAL switchboard.create_todo(x.target, v_queue, p_title, p_payload, p_delivery_key,
                                                         w.source_type, p_event_type, p_routing, v_event) c
              ORDER BY x.ord
    LOOP
        v_todos := v_todos || jsonb_build_object('id', r.todo_id, 'endpoint_id', r.target,
                                                 'queue', v_queue, 'created', r.created);
        v_created := v_created + r.created::int;
    END LOOP;
    RETURN jsonb_build_object('event_id', v_event, 'duplicate', false, 'disposition', p_disposition,
                              'trust_mode', w.trust_mode, 'todos', v_todos, 'created', v_created);
END
$$;
COMMENT ON FUNCTION switchboard.ingest(uuid, text, text, boolean, text, text, int, jsonb, jsonb, text, text, jsonb, text, uuid[], text, bigint) IS
  'Store one verified delivery and fan it out: event row plus one todo per live target (owner first, then routes), in one transaction. Redeliveries answer with the first delivery''s todos. no_targets when nothing is live. With p_ingest_token and p_rules_version, refuses a rotated or deleted token (not_found) and rules changed since they were read (stale).';

