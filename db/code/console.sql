-- The console's screens (server/console): every function takes the signed-in human (p_human,
-- from their session) and returns only that human's rows, or everyone's for an operator human.
-- Another human's id, a malformed id and an unknown id are the same: NULL (the console's
-- not-found page). Every write records itself in console_audit, in the same transaction.

-- Whether the human p_viewer may see rows of p_owner: their own, or anyone's for an operator.
CREATE OR REPLACE FUNCTION switchboard.console_sees(p_viewer uuid, p_owner uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT p_viewer = p_owner OR coalesce((SELECT operator FROM switchboard.humans WHERE id = p_viewer), false)
$$;
COMMENT ON FUNCTION switchboard.console_sees(uuid, uuid) IS
  'Console visibility: a human sees their own rows; an operator human sees everyone''s.';

-- The audit helper: one row per console action (who, what, on which object, when).
CREATE OR REPLACE FUNCTION switchboard.console_audit_add(p_human uuid, p_action text, p_object text, p_detail jsonb)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO switchboard.console_audit (human_id, action, object, detail)
    VALUES (p_human, p_action, coalesce(p_object, ''), coalesce(p_detail, '{}'))
$$;
COMMENT ON FUNCTION switchboard.console_audit_add(uuid, text, text, jsonb) IS
  'Record a console action: human, action (e.g. endpoint.vend), object (e.g. endpoint:<id>), detail.';

-- The audit log: the human's own actions, everyone's for an operator; newest first.
CREATE OR REPLACE FUNCTION switchboard.console_audit_list(p_human uuid, p_limit int) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT jsonb_agg(jsonb_build_object('id', a.id, 'human', h.name, 'action', a.action,
                                                         'object', a.object, 'detail', a.detail,
                                                         'at', switchboard.rfc3339(a.at)) ORDER BY a.id DESC)
                       FROM (SELECT * FROM switchboard.console_audit a
                              WHERE a.human_id = p_human OR switchboard.console_sees(p_human, a.human_id)
                              ORDER BY a.id DESC LIMIT least(greatest(p_limit, 1), 500)) a
                       LEFT JOIN switchboard.humans h ON h.id = a.human_id), '[]'::jsonb);
END
$$;
COMMENT ON FUNCTION switchboard.console_audit_list(uuid, int) IS
  'Console audit rows the human may see (their own; an operator everyone''s), newest first.';

-- Home: the human's agents and endpoints, and per queue of their endpoints the counts by state
-- and the oldest pending age: the Queues screen's counts (console_queues, each state read
-- through its own partial index, so the done history, however long, is never scanned).
CREATE OR REPLACE FUNCTION switchboard.console_home(p_human uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN jsonb_build_object(
        'endpoints', coalesce((
            SELECT jsonb_agg(switchboard.endpoint_json(e) ORDER BY h.name, a.name, e.created_at, e.id)
              FROM switchboard.endpoints e
              JOIN switchboard.agents a ON a.id = e.agent_id
              JOIN switchboard.humans h ON h.id = a.owner_human_id
             WHERE switchboard.console_sees(p_human, a.owner_human_id)), '[]'::jsonb),
        'queues', switchboard.console_queues(p_human,
                      (SELECT operator FROM switchboard.humans WHERE id = p_human)));
END
$$;
COMMENT ON FUNCTION switchboard.console_home(uuid) IS
  'Home screen: the endpoints the human may see, and per endpoint queue the counts of console_queues.';

-- One endpoint the human may see, with its OAuth grants; NULL for another human's, a malformed
-- or an unknown id.
CREATE OR REPLACE FUNCTION switchboard.console_endpoint(p_human uuid, p_endpoint text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT switchboard.endpoint_json(e) || jsonb_build_object('grants', switchboard.oauth_grant_list(e.id))
              FROM switchboard.endpoints e
              JOIN switchboard.agents a ON a.id = e.agent_id
             WHERE e.id = switchboard.as_uuid(p_endpoint)
               AND switchboard.console_sees(p_human, a.owner_human_id));
END
$$;
COMMENT ON FUNCTION switchboard.console_endpoint(uuid, text) IS
  'An endpoint (and its OAuth grants) the human may see; NULL otherwise (not found).';

-- The verbs an endpoint may be granted, by family, for the vend form.
CREATE OR REPLACE FUNCTION switchboard.console_vend_form() RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'families', (SELECT jsonb_agg(jsonb_build_object('family', f.family, 'verbs', f.verbs) ORDER BY f.ord)
                       FROM (SELECT v.family, jsonb_agg(v.name ORDER BY v.name) AS verbs,
                                    array_position(ARRAY['todo', 'webhook', 'route', 'rule', 'event'], v.family) AS ord
                               FROM switchboard.verbs v GROUP BY v.family) f),
        'source_types', to_jsonb(ARRAY['generic', 'github', 'gitea', 'stripe', 'slack', 'cairn', 'standard']))
$$;
COMMENT ON FUNCTION switchboard.console_vend_form() IS 'The verb families and webhook source types the vend form offers.';

-- Vend an endpoint for one of the signed-in human's agents (created when new).
CREATE OR REPLACE FUNCTION switchboard.console_endpoint_vend(
    p_human uuid, p_agent text, p_credential_hash bytea, p_credential_prefix text, p_queues text[],
    p_verbs text[], p_webhook_max int, p_webhook_sources text[], p_webhook_queues text[], p_lease_ttl_seconds int)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_out jsonb;
BEGIN
    SELECT name INTO v_name FROM switchboard.humans WHERE id = p_human;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'unknown human');
    END IF;
    IF coalesce(cardinality(p_verbs), 0) = 0 THEN
        PERFORM switchboard.refuse('invalid_argument', 'choose at least one verb');
    END IF;
    v_out := switchboard.endpoint_vend(v_name, p_agent, p_credential_hash, p_credential_prefix, p_queues, p_verbs,
                                       p_webhook_max, p_webhook_sources, p_webhook_queues, p_lease_ttl_seconds);
    PERFORM switchboard.console_audit_add(p_human, 'endpoint.vend', 'endpoint:' || (v_out->>'endpoint_id'),
                                          jsonb_build_object('agent', p_agent, 'queues', to_jsonb(p_queues)));
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION switchboard.console_endpoint_vend(uuid, text, bytea, text, text[], text[], int, text[], text[], int) IS
  'Vend an endpoint for an agent of the signed-in human (endpoint_vend''s checks); audited.';

-- Rotate the credential of an endpoint the human may see (grace: the old one keeps working).
-- NULL: not found.
CREATE OR REPLACE FUNCTION switchboard.console_endpoint_rotate(
    p_human uuid, p_endpoint text, p_credential_hash bytea, p_credential_prefix text, p_grace interval)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid := (switchboard.console_endpoint(p_human, p_endpoint)->>'endpoint_id')::uuid;
    v_out jsonb;
BEGIN
    IF v_id IS NULL THEN
        RETURN NULL;
    END IF;
    v_out := switchboard.endpoint_rotate(v_id, p_credential_hash, p_credential_prefix, p_grace);
    PERFORM switchboard.console_audit_add(p_human, 'endpoint.rotate', 'endpoint:' || v_id,
                                          jsonb_build_object('grace_seconds', extract(epoch FROM coalesce(p_grace, interval '0'))));
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION switchboard.console_endpoint_rotate(uuid, text, bytea, text, interval) IS
  'Rotate the credential of an endpoint the human may see; NULL when not found; audited.';

-- Revoke an endpoint the human may see. NULL: not found.
CREATE OR REPLACE FUNCTION switchboard.console_endpoint_revoke(p_human uuid, p_endpoint text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid := (switchboard.console_endpoint(p_human, p_endpoint)->>'endpoint_id')::uuid;
    v_out jsonb;
BEGIN
    IF v_id IS NULL THEN
        RETURN NULL;
    END IF;
    v_out := switchboard.endpoint_revoke(v_id);
    PERFORM switchboard.console_audit_add(p_human, 'endpoint.revoke', 'endpoint:' || v_id, '{}');
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION switchboard.console_endpoint_revoke(uuid, text) IS
  'Revoke an endpoint the human may see; NULL when not found; audited.';

-- Revoke an OAuth grant on an endpoint the human may see. NULL: not found.
CREATE OR REPLACE FUNCTION switchboard.console_grant_revoke(p_human uuid, p_grant text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    g switchboard.oauth_grants;
BEGIN
    SELECT gr.* INTO g FROM switchboard.oauth_grants gr
      JOIN switchboard.endpoints e ON e.id = gr.endpoint_id
      JOIN switchboard.agents a ON a.id = e.agent_id
     WHERE gr.id = switchboard.as_uuid(p_grant) AND switchboard.console_sees(p_human, a.owner_human_id);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM switchboard.oauth_grants_revoke(g.id, NULL);
    PERFORM switchboard.console_audit_add(p_human, 'grant.revoke', 'grant:' || g.id,
                                          jsonb_build_object('endpoint_id', g.endpoint_id));
    RETURN jsonb_build_object('grant_id', g.id, 'endpoint_id', g.endpoint_id, 'state', 'revoked');
END
$$;
COMMENT ON FUNCTION switchboard.console_grant_revoke(uuid, text) IS
  'Revoke an OAuth grant of an endpoint the human may see; NULL when not found; audited.';

-- The consent page, signed in: the endpoint's owner (or an operator) approves a hosted agent
-- without an approval code. {grant_id} or {refused: not_owner | endpoint_inactive}.
CREATE OR REPLACE FUNCTION switchboard.console_oauth_approve(
    p_human uuid, p_endpoint uuid, p_client_hash bytea, p_client_name text, p_redirect_host text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_owner uuid;
    v_grant uuid;
BEGIN
    SELECT a.owner_human_id INTO v_owner FROM switchboard.endpoints e JOIN switchboard.agents a ON a.id = e.agent_id
     WHERE e.id = p_endpoint AND e.state = 'active';
    IF NOT FOUND THEN
        RETURN jsonb_build_object('refused', 'endpoint_inactive');
    END IF;
    IF NOT switchboard.console_sees(p_human, v_owner) THEN
        RETURN jsonb_build_object('refused', 'not_owner');
    END IF;
    INSERT INTO switchboard.oauth_grants (endpoint_id, client_hash, client_name, redirect_host)
    VALUES (p_endpoint, p_client_hash, p_client_name, p_redirect_host)
    RETURNING id INTO v_grant;
    UPDATE switchboard.oauth_clients SET expires_at = NULL WHERE client_hash = p_client_hash AND kind = 'dcr';
    PERFORM switchboard.console_audit_add(p_human, 'grant.approve', 'grant:' || v_grant,
                                          jsonb_build_object('endpoint_id', p_endpoint, 'client', p_client_name));
    RETURN jsonb_build_object('grant_id', v_grant);
END
$$;
COMMENT ON FUNCTION switchboard.console_oauth_approve(uuid, uuid, bytea, text, text) IS
  'A signed-in owner (or operator) approves a hosted agent on an active endpoint, no approval code: {grant_id} or {refused}; audited.';

-- Friends: the edges touching the human (an operator: every edge), with their direction.
CREATE OR REPLACE FUNCTION switchboard.console_friends(p_human uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT jsonb_agg(switchboard.friend_json(f) || jsonb_build_object(
                                'direction', CASE WHEN f.to_human = p_human THEN 'incoming'
                                                  WHEN f.from_human = p_human THEN 'outgoing' ELSE 'others' END)
                            ORDER BY f.created_at DESC, f.id)
                       FROM switchboard.friend_edges f
                      WHERE p_human IN (f.from_human, f.to_human) OR switchboard.console_sees(p_human, f.from_human)),
                    '[]'::jsonb);
END
$$;
COMMENT ON FUNCTION switchboard.console_friends(uuid) IS
  'Friend edges touching the human (incoming, outgoing; an operator also sees others''), newest first.';

-- Request a friend edge from the signed-in human to another, by name.
CREATE OR REPLACE FUNCTION switchboard.console_friend_request(p_human uuid, p_to text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_out jsonb;
BEGIN
    SELECT name INTO v_name FROM switchboard.humans WHERE id = p_human;
    IF p_to IS NULL OR btrim(p_to) = '' THEN
        PERFORM switchboard.refuse('invalid_argument', 'name the human to befriend');
    END IF;
    v_out := switchboard.friend_request(v_name, btrim(p_to));
    PERFORM switchboard.console_audit_add(p_human, 'friend.request', 'friend:' || (v_out->>'id'),
                                          jsonb_build_object('to', btrim(p_to)));
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION switchboard.console_friend_request(uuid, text) IS
  'Request a friend edge from the signed-in human to the named one; audited.';

-- Decide an edge: the recipient approves or denies a pending request; either side (or an
-- operator) revokes an approved one. NULL: not found (not one the human may decide).
CREATE OR REPLACE FUNCTION switchboard.console_friend_decide(p_human uuid, p_edge text, p_state text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    f switchboard.friend_edges;
    v_out jsonb;
BEGIN
    SELECT * INTO f FROM switchboard.friend_edges WHERE id = switchboard.as_uuid(p_edge);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- (PL/pgSQL cannot take a CASE ... THEN inside an IF condition: two ifs.)
    IF NOT switchboard.console_sees(p_human, f.to_human)
       AND NOT (p_state = 'revoked' AND p_human = f.from_human) THEN
        RETURN NULL;
    END IF;
    v_out := switchboard.friend_decide(f.id, p_state);
    PERFORM switchboard.console_audit_add(p_human, 'friend.' || p_state, 'friend:' || f.id, '{}');
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION switchboard.console_friend_decide(uuid, text, text) IS
  'Approve or deny a request to the human, or revoke an approved edge of theirs; NULL when not found; audited.';
