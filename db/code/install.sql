-- Switchboard's code package: every function, view and trigger of schema switchboard.
--
-- The tables are in db/migrations/; this package holds the logic, one file per concern, each
-- object in its current definition only. `switchboard migrate` runs the migrations and then this
-- file in the same transaction; `tern code install db/code -c tern.conf` runs it alone. Either
-- way the install is complete and repeatable:
--
--   1. drop every trigger on the switchboard tables, every view and every function of the
--      schema, so an object removed from the package is gone afterwards. A function that a
--      table still needs (a column default, a CHECK, an index expression, a policy) is kept and
--      replaced in place by its CREATE OR REPLACE below; today no table needs one;
--   2. create everything again, in dependency order (SQL-language bodies are checked when they
--      are created, so what they call must exist first);
--   3. create the roles if they are missing and grant what each may do (grants.sql).
--
-- Files are Go templates (tern code packages): never write two opening braces in SQL here.

SET LOCAL check_function_bodies = on;

DO $drop$
DECLARE
    r record;
    v_list text;
BEGIN
    FOR r IN SELECT t.tgname, t.tgrelid::regclass AS tbl
               FROM pg_trigger t
               JOIN pg_class c ON c.oid = t.tgrelid
              WHERE c.relnamespace = 'switchboard'::regnamespace AND NOT t.tgisinternal
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.tbl);
    END LOOP;

    -- One statement each, so dependencies among the dropped objects do not matter. No CASCADE:
    -- an object outside the package that uses one of them (a DBA's own view) stops the install
    -- with PostgreSQL's "other objects depend on it" instead of vanishing.
    SELECT string_agg(c.oid::regclass::text, ', ') INTO v_list
      FROM pg_class c
     WHERE c.relnamespace = 'switchboard'::regnamespace AND c.relkind = 'v';
    IF v_list IS NOT NULL THEN
        EXECUTE 'DROP VIEW ' || v_list;
    END IF;

    SELECT string_agg(p.oid::regprocedure::text, ', ') INTO v_list
      FROM pg_proc p
     WHERE p.pronamespace = 'switchboard'::regnamespace
       AND NOT EXISTS (SELECT 1 FROM pg_depend d
                        WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = p.oid
                          AND d.classid <> 'pg_proc'::regclass);
    IF v_list IS NOT NULL THEN
        EXECUTE 'DROP ROUTINE ' || v_list;
    END IF;
END
$drop$;

{{ template "common.sql" . }}
{{ template "settings.sql" . }}
{{ template "doorbell.sql" . }}
{{ template "identity.sql" . }}
{{ template "queue.sql" . }}
{{ template "resources.sql" . }}
{{ template "leases.sql" . }}
{{ template "retention.sql" . }}
{{ template "webhooks.sql" . }}
{{ template "routes.sql" . }}
{{ template "rules.sql" . }}
{{ template "views.sql" . }}
{{ template "grants.sql" . }}
