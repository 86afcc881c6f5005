-- Roles and privileges: least privilege for the server, read-only for DBAs. Every install
-- applies this file again, after the functions were created afresh (a new function can be
-- executed by PUBLIC until the REVOKE below).
--
--   switchboard_runtime  what `switchboard serve` runs as (it logs in as DATABASE_URL names and
--                        SET ROLEs to this on every pooled connection). It may EXECUTE the
--                        entry points listed below and nothing else: no table privileges but
--                        SELECT on the tunables (settings) and the metrics view (queue_depth).
--                        The entry points run SECURITY DEFINER, as their owner (the user that
--                        ran the install), with a pinned search_path; the helpers they call run
--                        inside that, and nobody else may call them.
--   switchboard_dba      read-only: SELECT on every table and view of the schema, except the
--                        secret columns webhooks.signing_secret, previous_secret and ingest_token.
--                        Grant it to a DBA's login: GRANT switchboard_dba TO alice;
--
-- The owner (the migrating user) keeps every privilege: the operator CLI (switchboard human,
-- endpoint, friend, todo, settings, demo, migrate) runs as it.

-- Roles are cluster-wide: several databases of one cluster share them, and two installs in two
-- databases may race to create them (the loser sees duplicate_object or unique_violation).
DO $roles$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['switchboard_runtime', 'switchboard_dba'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;
    -- The migrating user may SET ROLE switchboard_runtime, so `switchboard serve` works with the
    -- same DATABASE_URL as `switchboard migrate`. (A superuser may anyway.) Another login needs
    -- GRANT switchboard_runtime TO <login>.
    IF NOT pg_has_role(current_user, 'switchboard_runtime', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT switchboard_runtime TO %I', current_user);
        EXCEPTION WHEN unique_violation THEN
            NULL;
        END;
    END IF;
END
$roles$;

GRANT USAGE ON SCHEMA switchboard TO switchboard_runtime, switchboard_dba;

-- Start from nothing, so what is not granted below is not granted.
REVOKE ALL ON ALL TABLES IN SCHEMA switchboard FROM PUBLIC, switchboard_runtime, switchboard_dba;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA switchboard FROM PUBLIC, switchboard_runtime, switchboard_dba;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA switchboard FROM PUBLIC, switchboard_runtime, switchboard_dba;
-- ALL FUNCTIONS leaves procedures out (purge_all): the owner and pg_cron run it, nobody else.
REVOKE ALL ON ALL PROCEDURES IN SCHEMA switchboard FROM PUBLIC, switchboard_runtime, switchboard_dba;

-- The runtime's entry points: each SQL call the server makes (all of them in server/store, for
-- the MCP tools, the receiver, OAuth, the doorbell and the reaper). A new call in the server
-- needs its function here; the test TestRuntimePrivileges lists what the runtime may do.
DO $runtime$
DECLARE
    f regprocedure;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        -- authentication (every MCP request)
        'switchboard.credential_resolve(bytea)',
        'switchboard.endpoint_resolve(bytea)',  -- the previous release's; see identity.sql
        -- the queue verbs
        'switchboard.list_todos(uuid, text, text, int)',
        'switchboard.get_todo(uuid, uuid)',
        'switchboard.claim(uuid, uuid, int, boolean)',
        'switchboard.claim_next(uuid, text, int, boolean)',
        'switchboard.heartbeat(uuid, uuid, int, text)',
        'switchboard.complete(uuid, uuid, jsonb, text)',
        'switchboard.fail(uuid, uuid, jsonb, text)',
        'switchboard.release(uuid, uuid, text)',
        'switchboard.finish_and_claim_next(uuid, uuid, text, jsonb, text, text, int, boolean)',
        'switchboard.claim_next_many(uuid, int, text, int, boolean)',
        'switchboard.complete_many(uuid, jsonb)',
        'switchboard.fail_many(uuid, jsonb)',
        'switchboard.release_many(uuid, jsonb)',
        -- queues as MCP resources
        'switchboard.queue_resources(uuid)',
        'switchboard.queue_resource(uuid, text, int)',
        -- webhook, route, rule and event verbs
        'switchboard.webhook_create(uuid, text, text, text, text)',
        'switchboard.webhook_rotate(uuid, text, text, text)',
        'switchboard.webhook_delete(uuid, text)',
        'switchboard.webhook_list(uuid)',
        'switchboard.owned_webhook(uuid, text)',
        'switchboard.route_add(uuid, text, text)',
        'switchboard.route_list(uuid, text)',
        'switchboard.route_remove(uuid, text, text)',
        'switchboard.rules_get(uuid, text)',
        'switchboard.rules_save(uuid, text, jsonb, jsonb, jsonb, bigint)',
        'switchboard.events_list(uuid, text, int, bigint)',
        'switchboard.event_get(uuid, text, text)',
        -- MCP Events (events.sql)
        'switchboard.events_types(uuid)',
        'switchboard.events_poll(uuid, text, jsonb, text, int, bigint)',
        'switchboard.events_subscribe(uuid, text, jsonb, text, text, text, bigint, bigint, boolean, bytea)',
        'switchboard.events_unsubscribe(uuid, text, jsonb, text)',
        'switchboard.events_record()',
        'switchboard.events_fanout(int)',
        'switchboard.events_outbox_take(int, int)',
        'switchboard.events_outbox_done_posts(bigint[], text[], text[], text[])',
        -- the previous release's senders record outcomes by row (superseded by
        -- events_outbox_done_posts, which names each POST's subscription): kept a release
        'switchboard.events_outbox_done_many(bigint[], text[], text[])',
        'switchboard.events_outbox_age()',
        -- the receiver
        'switchboard.ingest_if_current(uuid, text, text, boolean, text, text, int, jsonb, jsonb, text, text, jsonb, text, uuid[], text, bigint)',
        'switchboard.webhook_for_ingest(text)',
        -- the previous release's receiver reads webhook_by_token (superseded by
        -- webhook_for_ingest): kept until the release after, so a server of the previous
        -- release keeps working during a rolling upgrade (expand and contract)
        'switchboard.webhook_by_token(text)',
        'switchboard.webhook_refused(uuid, bigint, bigint, bigint, bigint, timestamptz, text, text)',
        -- the doorbell and the reaper
        'switchboard.ready_todos_since(timestamptz, int)',
        'switchboard.oldest_pending(uuid, int)',
        'switchboard.due_todos(uuid[], timestamptz, int)',
        'switchboard.next_due(uuid[], interval)',
        'switchboard.claimable_todos(uuid[])',
        'switchboard.reap()',
        -- the OAuth authorization server (server/oauth)
        'switchboard.oauth_client_get(bytea)',
        'switchboard.oauth_client_put(bytea, text, text, text[], jsonb, interval, int)',
        'switchboard.oauth_endpoint(text)',
        'switchboard.oauth_approve(uuid, bytea, bytea, text, text)',
        'switchboard.oauth_token_put(text, bytea, text, uuid, timestamptz, jsonb)',
        'switchboard.oauth_token_get(text, bytea)',
        'switchboard.oauth_token_deactivate(text, bytea)',
        'switchboard.oauth_token_delete(text, bytea)',
        'switchboard.oauth_token_revoke_family(text, text)',
        -- the human console (server/console): sign-in and sessions, then the screens; each
        -- takes the signed-in human and answers only their rows (an operator's: everyone's)
        'switchboard.console_invite_open(bytea)',
        'switchboard.console_ceremony_put(bytea, text, bytea, jsonb, interval)',
        'switchboard.console_ceremony_take(bytea, text)',
        'switchboard.console_passkey_register(bytea, bytea, jsonb)',
        'switchboard.console_webauthn_user(uuid)',
        'switchboard.console_passkey_used(bytea, jsonb)',
        'switchboard.console_session_start(uuid, bytea, interval, interval)',
        'switchboard.console_session_get(bytea)',
        'switchboard.console_session_end(bytea)',
        'switchboard.console_passkey_list(uuid)',
        'switchboard.console_passkey_remove(uuid, text)',
        'switchboard.console_audit_add(uuid, text, text, jsonb)',
        'switchboard.console_audit_list(uuid, int)',
        'switchboard.console_home(uuid)',
        'switchboard.console_endpoint(uuid, text)',
        'switchboard.console_vend_form()',
        'switchboard.console_endpoint_vend(uuid, text, bytea, text, text[], text[], int, text[], text[], int)',
        'switchboard.console_endpoint_rotate(uuid, text, bytea, text, interval)',
        'switchboard.console_endpoint_revoke(uuid, text)',
        'switchboard.console_grant_revoke(uuid, text)',
        'switchboard.console_oauth_approve(uuid, uuid, bytea, text, text)',
        'switchboard.console_friends(uuid)',
        'switchboard.console_friend_request(uuid, text)',
        'switchboard.console_friend_decide(uuid, text, text)',
        -- the console's queues, webhooks and chart (console_queues.sql, console_webhooks.sql):
        -- each takes the signed-in human and whether they are an operator
        'switchboard.console_queues(uuid, boolean)',
        'switchboard.console_todos(uuid, boolean, text, text, text, text, timestamptz, uuid, int)',
        'switchboard.console_todo(uuid, boolean, text)',
        'switchboard.console_action_count(uuid, boolean, text, text[], text, text, text, text)',
        'switchboard.console_act(uuid, boolean, text, text, text[], text, text, text, text)',
        'switchboard.console_todo_act(uuid, boolean, text, text, text)',
        'switchboard.console_push(uuid, boolean, text, text, text, jsonb)',
        'switchboard.console_chart(uuid, boolean)',
        'switchboard.console_webhooks(uuid, boolean)',
        'switchboard.console_webhook(uuid, boolean, text)',
        'switchboard.console_deliveries(uuid, boolean, text, bigint, int)',
        'switchboard.console_delivery(uuid, boolean, text, text)',
        'switchboard.console_webhook_set_secret(uuid, boolean, text, text, interval)',
        -- the maintenance loop (retention, rotation graces, the console chart's rollup) and serve's start
        'switchboard.console_rollup()',
        'switchboard.purge(boolean)',
        'switchboard.expire_credentials()',
        'switchboard.record_base_url(text)'
    ]::regprocedure[] LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO switchboard_runtime', f);
    END LOOP;
END
$runtime$;

-- Not function calls, granted narrowly: the doorbell reads its settings (setting() reads the
-- settings table as the caller, so the internal calls of the hot path stay cheap), and the
-- metrics collector reads the queue depth.
GRANT EXECUTE ON FUNCTION switchboard.setting(text) TO switchboard_runtime;
GRANT SELECT ON switchboard.settings, switchboard.queue_depth TO switchboard_runtime;

-- The DBA sees everything but the secrets. New tables and columns are covered at the next
-- install (the column list of webhooks is read from the catalogue).
DO $dba$
DECLARE
    r record;
    v_columns text;
BEGIN
    FOR r IN SELECT c.oid::regclass AS rel
               FROM pg_class c
              WHERE c.relnamespace = 'switchboard'::regnamespace AND c.relkind IN ('r', 'v', 'p')
                AND c.oid NOT IN ('switchboard.webhooks'::regclass, 'switchboard.event_hooks'::regclass,
                                  'switchboard.event_outbox'::regclass)
    LOOP
        EXECUTE format('GRANT SELECT ON %s TO switchboard_dba', r.rel);
    END LOOP;
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_columns
      FROM pg_attribute a
     WHERE a.attrelid = 'switchboard.webhooks'::regclass AND a.attnum > 0 AND NOT a.attisdropped
       AND a.attname NOT IN ('signing_secret', 'previous_secret', 'ingest_token');
    EXECUTE format('GRANT SELECT (%s) ON switchboard.webhooks TO switchboard_dba', v_columns);
    -- The MCP Events subscriptions and outbox: everything but the client's whsec_ secrets.
    GRANT SELECT (id, endpoint_id, name, arguments, url, pos_xact, pos_seq, refresh_before, active,
                  last_delivery_at, last_error, failed_since, failures, created_at, refreshed_at, grant_id)
       ON switchboard.event_hooks TO switchboard_dba;
    GRANT SELECT (id, hook_id, message_id, xact, seq, body, url, attempts, next_at, leased_until, created_at)
       ON switchboard.event_outbox TO switchboard_dba;
END
$dba$;
