-- Routes: extra target endpoints of a webhook, under ownership and friendship.

-- May a webhook owned by p_human deliver into p_target? Same human: yes. Another human: only with
-- an approved friend edge from p_human to the target's human. Inactive endpoints: never.
CREATE OR REPLACE FUNCTION switchboard.may_deliver(p_human uuid, p_target uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1
          FROM switchboard.endpoints te
          JOIN switchboard.agents ta ON ta.id = te.agent_id
         WHERE te.id = p_target AND te.state = 'active'
           AND (ta.owner_human_id = p_human
                OR EXISTS (SELECT 1 FROM switchboard.friend_edges f
                            WHERE f.from_human = p_human AND f.to_human = ta.owner_human_id
                              AND f.state = 'approved')))
$$;
COMMENT ON FUNCTION switchboard.may_deliver(uuid, uuid) IS
  'Whether a human''s webhooks may deliver into an endpoint: active, and same human or approved edge from that human to the target''s human.';

CREATE OR REPLACE FUNCTION switchboard.route_add(p_endpoint uuid, p_webhook text, p_target text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks := switchboard.owned_webhook(p_endpoint, p_webhook);
    v_target uuid := switchboard.as_uuid(p_target);
BEGIN
    -- Unknown, malformed, revoked and unfriended targets: one identical refusal.
    IF v_target IS NULL OR NOT switchboard.may_deliver((switchboard.caller(p_endpoint)).human_id, v_target) THEN
        PERFORM switchboard.refuse('forbidden', 'target endpoint is not reachable');
    END IF;
    -- The owner is an implicit target; recording it would change nothing.
    IF v_target <> w.endpoint_id THEN
        INSERT INTO switchboard.webhook_routes (webhook_id, target_endpoint_id, granted_by)
        VALUES (w.id, v_target, p_endpoint)
        ON CONFLICT (webhook_id, target_endpoint_id) DO NOTHING;
    END IF;
    RETURN jsonb_build_object('webhook_id', w.id, 'target_endpoint_id', v_target, 'routed', true);
END
$$;
COMMENT ON FUNCTION switchboard.route_add(uuid, text, text) IS
  'Route a webhook the caller''s human owns to a target endpoint (same human, or approved friend edge). Idempotent; one identical forbidden for unknown, malformed, revoked, unfriended targets.';

CREATE OR REPLACE FUNCTION switchboard.route_list(p_endpoint uuid, p_webhook text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    w switchboard.webhooks := switchboard.owned_webhook(p_endpoint, p_webhook);
BEGIN
    RETURN jsonb_build_object(
        'webhook_id', w.id,
        'owner_endpoint_id', w.endpoint_id,
        'routes', coalesce((SELECT jsonb_agg(jsonb_build_object('target_endpoint_id', r.target_endpoint_id,
                                                                'granted_at', switchboard.rfc3339(r.granted_at))
                                             ORDER BY r.granted_at, r.target_endpoint_id)
                              FROM switchboard.webhook_routes r WHERE r.webhook_id = w.id), '[]'));
END
$$;
COMMENT ON FUNCTION switchboard.route_list(uuid, text) IS
  'The owner and every recorded route of a webhook (also routes whose friendship was revoked). Ownership only.';

CREATE OR REPLACE FUNCTION switchboard.route_remove(p_endpoint uuid, p_webhook text, p_target text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    w switchboard.webhooks := switchboard.owned_webhook(p_endpoint, p_webhook);
BEGIN
    DELETE FROM switchboard.webhook_routes
     WHERE webhook_id = w.id AND target_endpoint_id::text = lower(p_target);
    RETURN jsonb_build_object('webhook_id', w.id, 'target_endpoint_id', p_target, 'removed', true);
END
$$;
COMMENT ON FUNCTION switchboard.route_remove(uuid, text, text) IS
  'Remove a route (idempotent; the owner cannot be removed - a no-op). Ownership only, no target authorization.';
