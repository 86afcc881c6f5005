-- Switchboard's code package: every function, view and trigger of schema switchboard.
--
-- The tables are in db/migrations/; this package holds the logic, one file per concern, each
-- object in its current definition only. `switchboard migrate` runs the migrations and then this
-- package in the same transaction, one statement at a time (db/install.go); `tern code install
-- db/code -c tern.conf` runs it alone, as one script. Either way the install is complete,
-- repeatable and in place, so it can run under live traffic (docs/sql.md, "Installing the code"):
--
--   1. create or replace everything, in dependency order (SQL-language bodies are checked when
--      they are created, so what they call must exist first). CREATE OR REPLACE keeps each
--      object's OID, so concurrent calls and their cached plans carry on. `switchboard migrate`
--      also copes with what CREATE OR REPLACE refuses (a routine whose result or parameters
--      changed, a view whose columns did: it drops that one object first), and re-creates a
--      trigger only when its statement changed;
--   2. drop what left the package: the functions, views and triggers of the schema that step 1
--      did not write (their catalogue rows are older than this transaction);
--   3. create the roles if they are missing and grant what each may do (grants.sql; it writes
--      every routine's catalogue row, hence after step 2).
--
-- `switchboard migrate` skips all of it when no migration ran and the package's fingerprint is
-- the one in switchboard.code_package.
--
-- Files are Go templates (tern code packages): never write two opening braces in SQL here.

SET LOCAL check_function_bodies = on;

{{ template "common.sql" . }}
{{ template "settings.sql" . }}
{{ template "doorbell.sql" . }}
{{ template "identity.sql" . }}
{{ template "oauth.sql" . }}
{{ template "queue.sql" . }}
{{ template "resources.sql" . }}
{{ template "leases.sql" . }}
{{ template "retention.sql" . }}
{{ template "webhooks.sql" . }}
{{ template "secrets.sql" . }}
{{ template "routes.sql" . }}
{{ template "rules.sql" . }}
{{ template "console_queues.sql" . }}
{{ template "console_webhooks.sql" . }}
{{ template "events.sql" . }}
{{ template "views.sql" . }}
{{ template "console.sql" . }}
{{ template "console_auth.sql" . }}

-- Step 2: what left the package. A catalogue row written by this transaction (or one of its
-- subtransactions) has an xmin no older than the transaction's own id; one the package did not
-- write is older. Triggers the install left alone because their statement did not change are
-- named in switchboard.install_kept_triggers (set by `switchboard migrate`).
DO $leftovers$
DECLARE
    v_xact xid := pg_current_xact_id()::xid;
    v_kept text[] := string_to_array(coalesce(current_setting('switchboard.install_kept_triggers', true), ''), ',');
    r record;
    v_list text;
BEGIN
    FOR r IN SELECT t.tgname, t.tgrelid::regclass AS tbl
               FROM pg_trigger t
               JOIN pg_class c ON c.oid = t.tgrelid
              WHERE c.relnamespace = 'switchboard'::regnamespace AND NOT t.tgisinternal
                AND age(t.xmin) > age(v_xact) AND NOT t.oid::text = ANY (v_kept)
    LOOP
        RAISE NOTICE 'dropping trigger % on %: no longer in the code package', r.tgname, r.tbl;
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.tbl);
    END LOOP;

    -- One statement each, so dependencies among the dropped objects do not matter. No CASCADE:
    -- an object outside the package that uses one of them (a DBA's own view) stops the install
    -- with PostgreSQL's "other objects depend on it" instead of vanishing.
    SELECT string_agg(c.oid::regclass::text, ', ') INTO v_list
      FROM pg_class c
      JOIN pg_rewrite w ON w.ev_class = c.oid AND w.rulename = '_RETURN'
     WHERE c.relnamespace = 'switchboard'::regnamespace AND c.relkind = 'v'
       AND age(w.xmin) > age(v_xact);
    IF v_list IS NOT NULL THEN
        RAISE NOTICE 'dropping view(s) %: no longer in the code package', v_list;
        EXECUTE 'DROP VIEW ' || v_list;
    END IF;

    -- A function that a table still needs (a column default, a CHECK, an index expression, a
    -- policy) is kept; so is an extension's. The package defines functions only (no procedure
    -- or aggregate), so a leftover routine of another kind is left to the DBA.
    SELECT string_agg(p.oid::regprocedure::text, ', ') INTO v_list
      FROM pg_proc p
     WHERE p.pronamespace = 'switchboard'::regnamespace AND p.prokind = 'f'
       AND age(p.xmin) > age(v_xact)
       AND NOT EXISTS (SELECT 1 FROM pg_depend d
                        WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = p.oid
                          AND d.classid <> 'pg_proc'::regclass)
       AND NOT EXISTS (SELECT 1 FROM pg_depend d
                        WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e');
    IF v_list IS NOT NULL THEN
        RAISE NOTICE 'dropping function(s) %: no longer in the code package', v_list;
        EXECUTE 'DROP FUNCTION ' || v_list;
    END IF;

    -- Whatever installed this, the record is unknown until `switchboard migrate` writes it.
    INSERT INTO switchboard.code_package AS p (one, fingerprint, triggers, installed_at)
    VALUES (true, NULL, '{}', now())
    ON CONFLICT (one) DO UPDATE SET fingerprint = NULL, triggers = '{}', installed_at = now();
END
$leftovers$;

{{ template "grants.sql" . }}
