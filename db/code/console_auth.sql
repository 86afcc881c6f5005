-- Console sign-in (server/console): invites, passkeys, WebAuthn ceremonies and sessions. Every
-- secret arrives as its sha256. The CLI mints invites (console_invite_create, owner only); the
-- server (switchboard_runtime) runs the rest.

-- An operator human sees every human's rows in the console.
CREATE OR REPLACE FUNCTION switchboard.human_set_operator(p_name text, p_operator boolean) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    h switchboard.humans;
BEGIN
    UPDATE switchboard.humans SET operator = p_operator WHERE name = p_name RETURNING * INTO h;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'unknown human');
    END IF;
    RETURN jsonb_build_object('id', h.id, 'name', h.name, 'operator', h.operator);
END
$$;
COMMENT ON FUNCTION switchboard.human_set_operator(text, boolean) IS
  'Mark a human operator (sees every human''s rows in the console) or not.';

-- A one-time sign-in link for a human (switchboard human invite): the token's sha256 and a life.
CREATE OR REPLACE FUNCTION switchboard.console_invite_create(p_human text, p_token_hash bytea, p_ttl interval)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_human uuid := switchboard.human_id(p_human);
    v_expires timestamptz;
BEGIN
    IF p_ttl IS NULL OR p_ttl < interval '1 minute' OR p_ttl > interval '30 days' THEN
        PERFORM switchboard.refuse('invalid_argument', 'invite ttl must be between 1 minute and 30 days');
    ELSIF p_token_hash IS NULL OR octet_length(p_token_hash) <> 32 THEN
        PERFORM switchboard.refuse('invalid_argument', 'token hash must be 32 bytes (sha256)');
    END IF;
    INSERT INTO switchboard.console_invites (token_hash, human_id, expires_at)
    VALUES (p_token_hash, v_human, now() + p_ttl)
    RETURNING expires_at INTO v_expires;
    INSERT INTO switchboard.console_audit (human_id, action, object)
    VALUES (v_human, 'invite.create', 'human:' || v_human);
    RETURN jsonb_build_object('human', p_human, 'human_id', v_human, 'expires_at', switchboard.rfc3339(v_expires));
END
$$;
COMMENT ON FUNCTION switchboard.console_invite_create(text, bytea, interval) IS
  'Store a one-time console sign-in link (by sha256 of its token) for a human, valid for p_ttl.';

-- The human a live invite is for; NULL when the token is unknown, used or expired.
CREATE OR REPLACE FUNCTION switchboard.console_invite_open(p_token_hash bytea) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT jsonb_build_object('human_id', h.id, 'name', h.name,
                                      'passkeys', (SELECT count(*) FROM switchboard.console_passkeys p WHERE p.human_id = h.id))
              FROM switchboard.console_invites i
              JOIN switchboard.humans h ON h.id = i.human_id
             WHERE i.token_hash = p_token_hash AND i.used_at IS NULL AND i.expires_at > now());
END
$$;
COMMENT ON FUNCTION switchboard.console_invite_open(bytea) IS
  'The human of an unused, unexpired invite ({human_id, name, passkeys}); NULL otherwise.';

-- A WebAuthn ceremony begins: its data is kept for p_ttl under the sha256 of a cookie.
CREATE OR REPLACE FUNCTION switchboard.console_ceremony_put(
    p_id_hash bytea, p_kind text, p_invite bytea, p_data jsonb, p_ttl interval)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM switchboard.console_ceremonies WHERE expires_at < now();
    INSERT INTO switchboard.console_ceremonies (id_hash, kind, invite, data, expires_at)
    VALUES (p_id_hash, p_kind, p_invite, p_data, now() + p_ttl);
END
$$;
COMMENT ON FUNCTION switchboard.console_ceremony_put(bytea, text, bytea, jsonb, interval) IS
  'Keep a WebAuthn ceremony''s session data (by sha256 of its cookie) for p_ttl; expired ones are dropped.';

-- A ceremony ends: its data, once (the row is deleted); NULL when unknown, expired or of another kind.
CREATE OR REPLACE FUNCTION switchboard.console_ceremony_take(p_id_hash bytea, p_kind text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    c switchboard.console_ceremonies;
BEGIN
    DELETE FROM switchboard.console_ceremonies WHERE id_hash = p_id_hash RETURNING * INTO c;
    IF NOT FOUND OR c.kind <> p_kind OR c.expires_at < now() THEN
        RETURN NULL;
    END IF;
    RETURN jsonb_build_object('data', c.data, 'invite', encode(c.invite, 'hex'));
END
$$;
COMMENT ON FUNCTION switchboard.console_ceremony_take(bytea, text) IS
  'Take (delete and return) a live ceremony of that kind: {data, invite}; NULL otherwise.';

-- A passkey registered through an invite: the invite is used up and the passkey stored in one
-- statement's transaction; NULL when the invite is no longer live.
CREATE OR REPLACE FUNCTION switchboard.console_passkey_register(
    p_invite bytea, p_credential_id bytea, p_credential jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_human uuid;
    v_id uuid;
BEGIN
    UPDATE switchboard.console_invites SET used_at = now()
     WHERE token_hash = p_invite AND used_at IS NULL AND expires_at > now()
    RETURNING human_id INTO v_human;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO switchboard.console_passkeys (human_id, credential_id, credential)
    VALUES (v_human, p_credential_id, p_credential)
    RETURNING id INTO v_id;
    INSERT INTO switchboard.console_audit (human_id, action, object)
    VALUES (v_human, 'passkey.register', 'passkey:' || v_id);
    RETURN jsonb_build_object('human_id', v_human, 'passkey_id', v_id);
END
$$;
COMMENT ON FUNCTION switchboard.console_passkey_register(bytea, bytea, jsonb) IS
  'Use up a live invite and store the passkey registered with it: {human_id, passkey_id}; NULL when the invite is used, expired or unknown.';

-- The human a passkey sign-in names (its user handle is the human id) and their passkeys.
CREATE OR REPLACE FUNCTION switchboard.console_webauthn_user(p_human uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT jsonb_build_object('human_id', h.id, 'name', h.name,
                                      'credentials', coalesce((SELECT jsonb_agg(p.credential ORDER BY p.created_at)
                                                                 FROM switchboard.console_passkeys p
                                                                WHERE p.human_id = h.id), '[]'::jsonb))
              FROM switchboard.humans h WHERE h.id = p_human);
END
$$;
COMMENT ON FUNCTION switchboard.console_webauthn_user(uuid) IS
  'A human and their passkeys (webauthn credentials), for a sign-in; NULL when unknown.';

-- After a sign-in: the credential's new state (sign count, flags) and when it was used.
CREATE OR REPLACE FUNCTION switchboard.console_passkey_used(p_credential_id bytea, p_credential jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE switchboard.console_passkeys SET credential = p_credential, last_used_at = now()
     WHERE credential_id = p_credential_id;
END
$$;
COMMENT ON FUNCTION switchboard.console_passkey_used(bytea, jsonb) IS 'Record a passkey''s use (its sign count and flags).';

-- A session begins (after a passkey registration or sign-in).
CREATE OR REPLACE FUNCTION switchboard.console_session_start(
    p_human uuid, p_id_hash bytea, p_idle interval, p_absolute interval)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM switchboard.console_sessions WHERE expires_at < now() - interval '1 day';
    INSERT INTO switchboard.console_sessions (id_hash, human_id, idle_timeout, expires_at)
    VALUES (p_id_hash, p_human, p_idle, now() + p_absolute);
    INSERT INTO switchboard.console_audit (human_id, action, object) VALUES (p_human, 'session.start', 'human:' || p_human);
END
$$;
COMMENT ON FUNCTION switchboard.console_session_start(uuid, bytea, interval, interval) IS
  'Start a console session (by sha256 of its cookie) with an idle and an absolute limit.';

-- The signed-in human of a live session, or no row. Seen again: the idle clock restarts (written
-- at most once a minute, so a busy page does not write on every request).
CREATE OR REPLACE FUNCTION switchboard.console_session_get(p_id_hash bytea)
RETURNS TABLE (human_id uuid, name text, operator boolean)
LANGUAGE plpgsql AS $$
DECLARE
    s switchboard.console_sessions;
BEGIN
    SELECT * INTO s FROM switchboard.console_sessions c
     WHERE c.id_hash = p_id_hash AND c.ended_at IS NULL AND c.expires_at > now()
       AND c.last_seen_at + c.idle_timeout > now();
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF s.last_seen_at < now() - interval '1 minute' THEN
        UPDATE switchboard.console_sessions SET last_seen_at = now() WHERE id_hash = p_id_hash;
    END IF;
    RETURN QUERY SELECT h.id, h.name, h.operator FROM switchboard.humans h WHERE h.id = s.human_id;
END
$$;
COMMENT ON FUNCTION switchboard.console_session_get(bytea) IS
  'The human of a live console session (not ended, within its idle and absolute limits); no row otherwise.';

-- Sign-out: the session ends on the server; its cookie opens nothing afterwards.
CREATE OR REPLACE FUNCTION switchboard.console_session_end(p_id_hash bytea) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_human uuid;
BEGIN
    UPDATE switchboard.console_sessions SET ended_at = now()
     WHERE id_hash = p_id_hash AND ended_at IS NULL
    RETURNING human_id INTO v_human;
    IF FOUND THEN
        INSERT INTO switchboard.console_audit (human_id, action, object) VALUES (v_human, 'session.end', 'human:' || v_human);
    END IF;
END
$$;
COMMENT ON FUNCTION switchboard.console_session_end(bytea) IS 'End a console session (sign-out).';

-- The signed-in human's passkeys (an operator's too: passkeys are one's own).
CREATE OR REPLACE FUNCTION switchboard.console_passkey_list(p_human uuid) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT jsonb_agg(jsonb_build_object('id', p.id, 'created_at', switchboard.rfc3339(p.created_at),
                                                         'last_used_at', switchboard.rfc3339(p.last_used_at))
                                      ORDER BY p.created_at, p.id)
                       FROM switchboard.console_passkeys p WHERE p.human_id = p_human), '[]'::jsonb);
END
$$;
COMMENT ON FUNCTION switchboard.console_passkey_list(uuid) IS 'A human''s passkeys: id, created, last used; never a key.';

-- Remove one of one's passkeys; not the last one (a human would be locked out until invited again).
CREATE OR REPLACE FUNCTION switchboard.console_passkey_remove(p_human uuid, p_passkey text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    SELECT id INTO v_id FROM switchboard.console_passkeys
     WHERE id = switchboard.as_uuid(p_passkey) AND human_id = p_human;
    IF NOT FOUND THEN
        PERFORM switchboard.refuse('not_found', 'unknown passkey');
    END IF;
    IF (SELECT count(*) FROM switchboard.console_passkeys WHERE human_id = p_human) = 1 THEN
        PERFORM switchboard.refuse('conflict', 'this is your only passkey: register another first (a new invite link adds one)');
    END IF;
    DELETE FROM switchboard.console_passkeys WHERE id = v_id;
    PERFORM switchboard.console_audit_add(p_human, 'passkey.remove', 'passkey:' || v_id, '{}');
    RETURN jsonb_build_object('id', v_id, 'removed', true);
END
$$;
COMMENT ON FUNCTION switchboard.console_passkey_remove(uuid, text) IS
  'Remove one of the human''s passkeys (not the last); not_found for another human''s or an unknown id.';
