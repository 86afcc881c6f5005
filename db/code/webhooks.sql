-- Webhooks and ingest: agent self-management within the endpoint's ceiling, delivery targets,
-- and storing deliveries.
--
-- Ingest tokens and signing secrets are minted by the caller (crypto/rand) and held here. The
-- receiver (server/receiver) verifies a delivery, runs its jq rules, and stores it with one call
-- to ingest_if_current() (ingest() under a check that its cached webhook is still current).

-- A webhook the caller's human owns (its owning endpoint belongs to the caller's human).
-- Unknown, malformed, deleted and foreign ids are one identical not_found.
CREATE OR REPLACE FUNCTION switchboard.owned_webhook(p_endpoint uuid, p_webhook text) RETURNS switchboard.webhooks
LANGUAGE plpgsql STABLE AS $$
DECLARE
    w switchboard.webhooks;
BEGIN
    SELECT wh.* INTO w
      FROM switchboard.webhooks wh
      JOIN switchboard.endpoints owner_ep ON owner_ep.id = wh.endpoint_id
      JOIN switchboard.agents owner_agent ON owner_agent.id = owner_ep.agent_id
     WHERE wh.id = switchboard.as_uuid(p_webhook) AND wh.deleted_at IS NULL
       AND owner_agent.owner_human_id = (switchboard.caller(p_endpoint)).human_id;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'webhook not found');
    END IF;
    RETURN w;
END
$$;
COMMENT ON FUNCTION switchboard.owned_webhook(uuid, text) IS
  'The live webhook p_webhook if the caller endpoint''s human owns it; one identical not_found otherwise.';

-- Rotate and delete act on the caller endpoint's own webhooks (the ones its ceiling counts).
CREATE OR REPLACE FUNCTION switchboard.own_webhook_for_update(p_endpoint uuid, p_webhook text) RETURNS switchboard.webhooks
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks;
BEGIN
    PERFORM switchboard.caller(p_endpoint);
    SELECT * INTO w FROM switchboard.webhooks
     WHERE id = switchboard.as_uuid(p_webhook) AND endpoint_id = p_endpoint AND deleted_at IS NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'webhook not found');
    END IF;
    RETURN w;
END
$$;
COMMENT ON FUNCTION switchboard.own_webhook_for_update(uuid, text) IS
  'Lock a live webhook owned by exactly this endpoint; not_found otherwise (unknown, malformed, deleted, foreign).';

-- The webhook as agents see it. The ingest token is returned so the server can build the ingest
-- URL; the signing secret never leaves through here. Signed types say whose secret is in force
-- (and until when the previous one still verifies), and every webhook its refused deliveries.
CREATE OR REPLACE FUNCTION switchboard.webhook_json(w switchboard.webhooks) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'webhook_id', w.id,
        'ingest_token', w.ingest_token,
        'source_type', w.source_type,
        'target_queue', w.target_queue,
        'trust_mode', w.trust_mode,
        'secret_source', CASE WHEN w.trust_mode = 'signed' THEN w.secret_source END,
        'secret_set_at', switchboard.rfc3339(w.secret_set_at),
        'previous_secret_until', CASE WHEN w.previous_secret_until > now()
                                      THEN switchboard.rfc3339(w.previous_secret_until) END,
        'created_at', switchboard.rfc3339(w.created_at),
        'rotated_at', switchboard.rfc3339(w.rotated_at)))
        || jsonb_build_object('refusals', (
               SELECT jsonb_build_object(
                          'total', coalesce(r.bad_signature + r.stale_timestamp + r.too_large + r.unparseable, 0),
                          'bad_signature', coalesce(r.bad_signature, 0),
                          'stale_timestamp', coalesce(r.stale_timestamp, 0),
                          'too_large', coalesce(r.too_large, 0),
                          'unparseable', coalesce(r.unparseable, 0))
                      || CASE WHEN r.last_at IS NULL THEN '{}'::jsonb
                              ELSE jsonb_build_object('last', jsonb_strip_nulls(jsonb_build_object(
                                       'at', switchboard.rfc3339(r.last_at),
                                       'reason', r.last_reason,
                                       'delivery_id', r.last_delivery_id))) END
                 FROM (SELECT 1) one
                 LEFT JOIN switchboard.webhook_refusals r ON r.webhook_id = w.id))
$$;
COMMENT ON FUNCTION switchboard.webhook_json(switchboard.webhooks) IS
  'Webhook metadata (never the secret): whose secret is in force, and the refused deliveries by reason with the last one.';

-- Create a webhook within the ceiling. Checks in the contract's order; the endpoint row is locked
-- so two concurrent creates cannot both take the last slot.
CREATE OR REPLACE FUNCTION switchboard.webhook_create(
    p_endpoint uuid, p_source_type text, p_target_queue text, p_ingest_token text, p_signing_secret text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    e switchboard.endpoints;
    w switchboard.webhooks;
    v_used int;
BEGIN
    PERFORM switchboard.caller(p_endpoint);
    IF coalesce(p_source_type, '') = '' OR coalesce(p_target_queue, '') = '' THEN
        PERFORM switchboard.refuse('invalid_argument', 'source_type and target_queue are required');
    END IF;
    SELECT * INTO e FROM switchboard.endpoints WHERE id = p_endpoint FOR UPDATE;
    IF NOT p_source_type = ANY (e.webhook_sources) THEN
        PERFORM switchboard.refuse('forbidden_source_type', 'source type is outside the webhook ceiling');
    END IF;
    IF switchboard.trust_mode(p_source_type) IS NULL THEN
        PERFORM switchboard.refuse('invalid_argument', 'unknown source type');
    END IF;
    IF NOT p_target_queue = ANY (e.webhook_queues) THEN
        PERFORM switchboard.refuse('forbidden', 'target queue is outside the webhook ceiling');
    END IF;
    SELECT count(*) INTO v_used FROM switchboard.webhooks WHERE endpoint_id = p_endpoint AND deleted_at IS NULL;
    IF v_used >= e.webhook_max THEN
        PERFORM switchboard.refuse('ceiling_exceeded', 'webhook count is at the ceiling');
    END IF;
    IF coalesce(length(p_ingest_token), 0) < 32 THEN
        PERFORM switchboard.refuse('invalid_argument', 'ingest token too short');
    END IF;
    INSERT INTO switchboard.webhooks (endpoint_id, source_type, trust_mode, target_queue, ingest_token, signing_secret)
    VALUES (p_endpoint, p_source_type, switchboard.trust_mode(p_source_type), p_target_queue, p_ingest_token,
            switchboard.signing_secret(p_source_type, p_signing_secret))
    RETURNING * INTO w;
    -- The minted secret is revealed once either way (SPEC); where the provider issues its own,
    -- the answer says so and what to do instead.
    RETURN switchboard.webhook_json(w)
        || jsonb_strip_nulls(jsonb_build_object('signing_secret', w.signing_secret,
                                                'secret_issuer', switchboard.secret_issuer(w.source_type),
                                                'next_step', switchboard.secret_next_step(w)));
END
$$;
COMMENT ON FUNCTION switchboard.webhook_create(uuid, text, text, text, text) IS
  'Create a webhook owned by the endpoint: invalid_argument, forbidden_source_type, invalid_argument (unknown type), forbidden (queue), ceiling_exceeded - in that order, atomically. Trust mode derived from the source type. Returns the secret once (signed types).';

CREATE OR REPLACE FUNCTION switchboard.webhook_rotate(
    p_endpoint uuid, p_webhook text, p_ingest_token text, p_signing_secret text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks := switchboard.own_webhook_for_update(p_endpoint, p_webhook);
BEGIN
    -- A minted secret would cut off a provider that signs with its own.
    IF w.secret_source = 'provider' THEN
        PERFORM switchboard.refuse('invalid_argument', format(
            'webhook %s verifies with the secret its provider issued; a minted one would cut the provider off. '
            'Rotate it at the provider, then have your human run: switchboard webhook set-secret %s --previous-ttl 24h',
            w.id, w.id));
    END IF;
    IF coalesce(length(p_ingest_token), 0) < 32 THEN
        PERFORM switchboard.refuse('invalid_argument', 'ingest token too short');
    END IF;
    UPDATE switchboard.webhooks
       SET ingest_token   = p_ingest_token,
           signing_secret = switchboard.signing_secret(source_type, p_signing_secret),
           previous_secret = NULL, previous_secret_until = NULL,
           rotated_at     = now()
     WHERE id = w.id
    RETURNING * INTO w;
    RETURN switchboard.webhook_json(w)
        || jsonb_strip_nulls(jsonb_build_object('signing_secret', w.signing_secret));
END
$$;
COMMENT ON FUNCTION switchboard.webhook_rotate(uuid, text, text, text) IS
  'New ingest token (and secret for signed types); the old URL and secret stop working at commit. invalid_argument while a provider''s secret is in force.';

CREATE OR REPLACE FUNCTION switchboard.webhook_delete(p_endpoint uuid, p_webhook text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks := switchboard.own_webhook_for_update(p_endpoint, p_webhook);
BEGIN
    -- Soft delete: events keep their webhook; the URL answers 404 and the slot frees at once.
    UPDATE switchboard.webhooks
       SET ingest_token = NULL, signing_secret = NULL, previous_secret = NULL, previous_secret_until = NULL,
           deleted_at = now()
     WHERE id = w.id;
    DELETE FROM switchboard.webhook_routes WHERE webhook_id = w.id;
    RETURN jsonb_build_object('webhook_id', w.id, 'deleted', true);
END
$$;
COMMENT ON FUNCTION switchboard.webhook_delete(uuid, text) IS
  'Delete an own webhook: token and secret erased, routes removed, ceiling slot freed; events are kept.';

CREATE OR REPLACE FUNCTION switchboard.webhook_list(p_endpoint uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    e switchboard.endpoints;
    v_hooks jsonb;
BEGIN
    PERFORM switchboard.caller(p_endpoint);
    SELECT * INTO e FROM switchboard.endpoints WHERE id = p_endpoint;
    SELECT coalesce(jsonb_agg(switchboard.webhook_json(w) ORDER BY w.created_at, w.id), '[]')
      INTO v_hooks
      FROM switchboard.webhooks w
     WHERE w.endpoint_id = p_endpoint AND w.deleted_at IS NULL;
    RETURN jsonb_build_object(
        'webhooks', v_hooks,
        'ceiling', jsonb_build_object('max', e.webhook_max,
                                      'allowed_source_types', to_jsonb(e.webhook_sources),
                                      'allowed_queues', to_jsonb(e.webhook_queues),
                                      'used', jsonb_array_length(v_hooks)));
END
$$;
COMMENT ON FUNCTION switchboard.webhook_list(uuid) IS 'The endpoint''s live webhooks and its ceiling with the count used. Never a secret.';

-- Where a webhook's deliveries land right now: the owning endpoint first (if active), then routed
-- endpoints in grant order that are active and, for another human, still befriended (an approved
-- edge from the webhook owner's human to the target's human). Re-evaluated at every delivery.
CREATE OR REPLACE FUNCTION switchboard.webhook_targets(p_webhook uuid)
RETURNS TABLE (endpoint_id uuid, ord bigint)
LANGUAGE sql STABLE AS $$
    WITH hook AS (
        SELECT w.id, w.endpoint_id, a.owner_human_id AS human_id
          FROM switchboard.webhooks w
          JOIN switchboard.endpoints e ON e.id = w.endpoint_id
          JOIN switchboard.agents a ON a.id = e.agent_id
         WHERE w.id = p_webhook AND w.deleted_at IS NULL
    )
    SELECT h.endpoint_id, 0
      FROM hook h
      JOIN switchboard.endpoints e ON e.id = h.endpoint_id AND e.state = 'active'
    UNION ALL
    SELECT r.target_endpoint_id, row_number() OVER (ORDER BY r.granted_at, r.target_endpoint_id)
      FROM hook h
      JOIN switchboard.webhook_routes r ON r.webhook_id = h.id AND r.target_endpoint_id <> h.endpoint_id
      JOIN switchboard.endpoints te ON te.id = r.target_endpoint_id AND te.state = 'active'
      JOIN switchboard.agents ta ON ta.id = te.agent_id
     WHERE ta.owner_human_id = h.human_id
        OR EXISTS (SELECT 1 FROM switchboard.friend_edges f
                    WHERE f.from_human = h.human_id AND f.to_human = ta.owner_human_id AND f.state = 'approved')
    ORDER BY 2
$$;
COMMENT ON FUNCTION switchboard.webhook_targets(uuid) IS
  'Live delivery targets of a webhook: owner (if active), then routes in grant order whose endpoint is active and whose friend edge (owner human -> target human) is approved.';

-- What the receiver needs before reading the body: the webhook behind an ingest token, with its
-- secret, its rules and the body cap of its source type. Rotated and deleted tokens find nothing.
-- PL/pgSQL for the reason endpoint_resolve is (identity.sql). Superseded by webhook_for_ingest
-- (secrets.sql), which the receiver calls; kept one release for the previous release's servers.
CREATE OR REPLACE FUNCTION switchboard.webhook_by_token(p_token text)
RETURNS TABLE (webhook_id uuid, endpoint_id uuid, source_type text, trust_mode text, signing_secret text,
               target_queue text, rules jsonb, default_action jsonb, rule_params jsonb, rules_version bigint,
               max_body bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT w.id, w.endpoint_id, w.source_type, w.trust_mode, w.signing_secret, w.target_queue,
           w.rules, w.default_action, w.rule_params, w.rules_version,
           (SELECT s.value FROM switchboard.settings s WHERE s.key = 'ingest_max_body_' || w.source_type)::bigint
      FROM switchboard.webhooks w
     WHERE w.ingest_token = p_token;
END
$$;
COMMENT ON FUNCTION switchboard.webhook_by_token(text) IS
  'Receiver lookup by ingest token (live webhooks only): the signing secret, the rule list version and the body cap of its source type (setting ingest_max_body_<source>).';

-- The receiver's answer for a delivery that was already stored: its todos, none created.
CREATE OR REPLACE FUNCTION switchboard.redelivery(w switchboard.webhooks, p_event bigint) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'event_id', ev.id, 'duplicate', true, 'disposition', ev.disposition, 'trust_mode', w.trust_mode,
        'created', 0,
        'todos', coalesce((SELECT jsonb_agg(jsonb_build_object('id', t.id, 'endpoint_id', t.endpoint_id,
                                                               'queue', t.queue, 'created', false)
                                            ORDER BY t.endpoint_id <> w.endpoint_id, r.granted_at, t.id)
                             FROM switchboard.todos t
                             LEFT JOIN switchboard.webhook_routes r
                                    ON r.webhook_id = w.id AND r.target_endpoint_id = t.endpoint_id
                            WHERE t.event_id = ev.id), '[]'))
      FROM switchboard.webhook_events ev
     WHERE ev.id = p_event
$$;
COMMENT ON FUNCTION switchboard.redelivery(switchboard.webhooks, bigint) IS
  'Answer for a redelivery: the stored event''s todos (owner first, then routes in grant order), created 0.';

-- One delivery, one transaction: the event row and one todo per target (or none when the rules
-- dropped or faulted it). A redelivery (same webhook and delivery key) stores nothing new and
-- answers with the todos of the first delivery. No live target: no_targets (nothing stored).
-- p_queue NULL means the webhook's target queue; p_endpoints NULL means every target, otherwise
-- the rules narrowed the delivery to that subset of the current targets.
CREATE OR REPLACE FUNCTION switchboard.ingest(
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
    p_endpoints     uuid[] DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks;
    v_event bigint;
    v_targets uuid[];
    v_queue text;
    v_todos jsonb := '[]'::jsonb;
    v_created int := 0;
    v_ids uuid[];
    v_id uuid;
    v_made boolean;
    v_size int;
    v_max_attempts int;
BEGIN
    SELECT * INTO w FROM switchboard.webhooks WHERE id = p_webhook AND deleted_at IS NULL;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'webhook not found');
    END IF;
    v_queue := coalesce(p_queue, w.target_queue);

    IF p_disposition = 'delivered' THEN
        v_targets := nullif(ARRAY(SELECT t.endpoint_id
                                    FROM switchboard.webhook_targets(p_webhook) t
                                   WHERE p_endpoints IS NULL OR t.endpoint_id = ANY (p_endpoints)
                                   ORDER BY t.ord), '{}');
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
            PERFORM switchboard.count_duplicate(v_event);
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

    IF v_targets IS NOT NULL THEN
        IF v_queue IS NULL OR v_queue !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$' THEN
            PERFORM switchboard.refuse('invalid_argument', 'queue name is invalid');
        END IF;
        -- Every target's todo in one statement (create_todo's insert, set-based): the payload
        -- stays in the event, and the settings and the payload's size are read once.
        SELECT coalesce(octet_length(p_payload::text), 0), (SELECT s.value FROM switchboard.settings s WHERE s.key = 'max_attempts')
          INTO v_size, v_max_attempts;
        WITH ins AS (
            INSERT INTO switchboard.todos (endpoint_id, queue, title, source, kind, payload_size, routing, event_id,
                                           idempotency_key, max_attempts)
            SELECT x.target, v_queue, coalesce(p_title, ''), w.source_type, p_event_type, v_size, p_routing, v_event,
                   p_delivery_key, v_max_attempts
              FROM unnest(v_targets) AS x (target)
            ON CONFLICT (endpoint_id, idempotency_key)
                WHERE idempotency_key IS NOT NULL AND (state IN ('pending', 'claimed') OR next_retry_at IS NOT NULL)
                DO NOTHING
            RETURNING endpoint_id, id
        )
        -- The ids in target order, and the answer built in the loop below: no ordered aggregate
        -- (array_agg/jsonb_agg ... ORDER BY), whose sort PostgreSQL 15 sets up for every call even
        -- for rows already in order. 18% less PostgreSQL CPU per delivery (docs/benchmarks.md).
        SELECT ARRAY(SELECT i.id
                       FROM unnest(v_targets) WITH ORDINALITY AS x (target, ord)
                       LEFT JOIN ins i ON i.endpoint_id = x.target
                      ORDER BY x.ord)
          INTO v_ids;
        -- Rare: a target whose live todo already holds the delivery key (an operator push with
        -- that key), so the insert skipped it. create_todo settles it as it did every target
        -- before: the live todo's id, created false (or a new todo if that one finished since).
        FOR k IN 1..cardinality(v_targets) LOOP
            v_id := v_ids[k];
            v_made := v_id IS NOT NULL;
            IF NOT v_made THEN
                SELECT c.todo_id, c.created INTO v_id, v_made
                  FROM switchboard.create_todo(v_targets[k], v_queue, p_title, p_payload, p_delivery_key,
                                               w.source_type, p_event_type, p_routing, v_event) c;
            END IF;
            v_todos := v_todos || jsonb_build_object('id', v_id, 'endpoint_id', v_targets[k], 'queue', v_queue, 'created', v_made);
            v_created := v_created + v_made::int;
        END LOOP;
        IF v_created > 0 THEN
            PERFORM switchboard.ring(); -- once per delivery, not per target
        END IF;
    END IF;
    RETURN jsonb_build_object('event_id', v_event, 'duplicate', false, 'disposition', p_disposition,
                              'trust_mode', w.trust_mode, 'todos', coalesce(v_todos, '[]'), 'created', v_created);
END
$$;
COMMENT ON FUNCTION switchboard.ingest(uuid, text, text, boolean, text, text, int, jsonb, jsonb, text, text, jsonb, text, uuid[]) IS
  'Store one verified delivery and fan it out: event row plus one todo per live target (owner first, then routes), in one transaction. Redeliveries answer with the first delivery''s todos. no_targets when nothing is live.';

CREATE OR REPLACE FUNCTION switchboard.ingest_if_current(
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
    p_queue         text,
    p_endpoints     uuid[],
    p_ingest_token  text,
    p_rules_version bigint)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_version bigint;
BEGIN
    -- A deleted webhook's token is erased, so it never matches.
    SELECT rules_version INTO v_version FROM switchboard.webhooks
     WHERE id = p_webhook AND ingest_token = p_ingest_token;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'webhook not found');
    ELSIF v_version <> p_rules_version THEN
        PERFORM switchboard.refuse('stale', 'the webhook''s rules changed since it was read');
    END IF;
    RETURN switchboard.ingest(p_webhook, p_delivery_key, p_event_type, p_verified, p_verify_detail,
                              p_content_type, p_payload_size, p_payload, p_headers, p_title, p_disposition,
                              p_routing, p_queue, p_endpoints);
END
$$;
COMMENT ON FUNCTION switchboard.ingest_if_current(uuid, text, text, boolean, text, text, int, jsonb, jsonb, text, text, jsonb, text, uuid[], text, bigint) IS
  'ingest() for a receiver that read the webhook earlier: not_found when the token was rotated or the webhook deleted since, stale when its rules were saved since; else ingest().';
