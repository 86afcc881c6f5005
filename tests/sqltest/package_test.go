package sqltest

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"switchboard/db"
	"switchboard/tests/testdb"
)

// packageObjects reads the names the code package defines, per kind, from its files.
func packageObjects(t *testing.T) (funcs, views, triggers map[string]string) {
	t.Helper()
	funcs, views, triggers = map[string]string{}, map[string]string{}, map[string]string{}
	defs := []struct {
		re  *regexp.Regexp
		out map[string]string
	}{
		{regexp.MustCompile(`(?m)^CREATE OR REPLACE (?:FUNCTION|PROCEDURE) switchboard\.(\w+)\(`), funcs},
		{regexp.MustCompile(`(?m)^CREATE OR REPLACE VIEW switchboard\.(\w+)`), views},
		{regexp.MustCompile(`(?m)^CREATE OR REPLACE TRIGGER (\w+)`), triggers},
	}
	err := fs.WalkDir(db.Code(), ".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(db.Code(), path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "CREATE FUNCTION") || strings.Contains(string(b), "CREATE VIEW") {
			t.Errorf("%s: use CREATE OR REPLACE, so every definition is found the same way", path)
		}
		for _, d := range defs {
			for _, m := range d.re.FindAllStringSubmatch(string(b), -1) {
				if prev, dup := d.out[m[1]]; dup {
					t.Errorf("%s is defined twice in the package (%s and %s)", m[1], prev, path)
				}
				d.out[m[1]] = path
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return funcs, views, triggers
}

func names(d *DB, sql string, args ...any) []string {
	d.t.Helper()
	rows, err := d.Query(ctx(), sql, args...)
	if err != nil {
		d.t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			d.t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		d.t.Fatal(err)
	}
	return out
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Every function, view and trigger of schema switchboard comes from the code package (and each
// package object is in the database), and every function and view carries a comment.
func TestCodePackageIsTheSchemasCode(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	funcs, views, triggers := packageObjects(t)

	gotFuncs := names(d, `SELECT DISTINCT proname::text FROM pg_proc
	                       WHERE pronamespace = 'switchboard'::regnamespace ORDER BY 1`)
	gotViews := names(d, `SELECT viewname::text FROM pg_views WHERE schemaname = 'switchboard' ORDER BY 1`)
	gotTriggers := names(d, `SELECT t.tgname::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	                          WHERE c.relnamespace = 'switchboard'::regnamespace AND NOT t.tgisinternal ORDER BY 1`)
	for _, c := range []struct {
		kind      string
		got, want []string
	}{{"functions", gotFuncs, keys(funcs)}, {"views", gotViews, keys(views)}, {"triggers", gotTriggers, keys(triggers)}} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s in the database %v\n  in the package %v", c.kind, c.got, c.want)
		}
	}
	if len(gotFuncs) < 60 || len(gotViews) < 3 {
		t.Fatalf("only %d functions and %d views: the package did not install", len(gotFuncs), len(gotViews))
	}
	// One definition per name: no overloads, so `\sf switchboard.claim_next` is unambiguous.
	overloads := names(d, `SELECT proname::text FROM pg_proc WHERE pronamespace = 'switchboard'::regnamespace
	                        GROUP BY proname HAVING count(*) > 1`)
	if len(overloads) > 0 {
		t.Errorf("overloaded functions: %v", overloads)
	}
	uncommented := names(d, `
		SELECT p.oid::regprocedure::text FROM pg_proc p
		 WHERE p.pronamespace = 'switchboard'::regnamespace
		   AND coalesce(obj_description(p.oid, 'pg_proc'), '') = ''
		UNION ALL
		SELECT c.oid::regclass::text FROM pg_class c
		 WHERE c.relnamespace = 'switchboard'::regnamespace AND c.relkind = 'v'
		   AND coalesce(obj_description(c.oid, 'pg_class'), '') = ''`)
	if len(uncommented) > 0 {
		t.Errorf("functions and views without a COMMENT: %v", uncommented)
	}
}

// schemaCode is a catalogue snapshot of the installed code: each function's definition and
// comment, each view's definition, each trigger.
func schemaCode(d *DB) []string {
	return names(d, `
		SELECT p.oid::regprocedure || ' ' || md5(pg_get_functiondef(p.oid)) || ' '
		       || coalesce(obj_description(p.oid, 'pg_proc'), '')
		  FROM pg_proc p WHERE p.pronamespace = 'switchboard'::regnamespace
		UNION ALL
		SELECT c.oid::regclass || ' ' || md5(pg_get_viewdef(c.oid)) || ' ' || coalesce(obj_description(c.oid, 'pg_class'), '')
		  FROM pg_class c WHERE c.relnamespace = 'switchboard'::regnamespace AND c.relkind = 'v'
		UNION ALL
		SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		 WHERE c.relnamespace = 'switchboard'::regnamespace AND NOT t.tgisinternal
		 ORDER BY 1`)
}

// Installing again (--reinstall) changes nothing; what the package no longer defines is dropped, except a
// function a table still depends on (here a column default), which keeps working; and a failed
// install leaves the database as it was (migrations and install are one transaction).
func TestMigrateAgainReinstallsThePackage(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	before := schemaCode(d)
	conn := connect(t, d.URL)

	d.exec(`CREATE FUNCTION switchboard.gone() RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	d.exec(`CREATE VIEW switchboard.gone_view AS SELECT 1 AS one`)
	d.exec(`CREATE FUNCTION switchboard.kept() RETURNS int LANGUAGE sql AS 'SELECT 7'`)
	d.exec(`CREATE TABLE public.uses_kept (x int DEFAULT switchboard.kept())`)

	res, err := db.MigrateWith(ctx(), conn, db.Options{Reinstall: true})
	if err != nil || res.Applied != 0 || res.Version < 1 {
		t.Fatalf("migrate again: %+v err=%v", res, err)
	}
	d.exec(`INSERT INTO public.uses_kept DEFAULT VALUES`)
	var x int
	if err := d.QueryRow(ctx(), `SELECT x FROM public.uses_kept`).Scan(&x); err != nil || x != 7 {
		t.Fatalf("default through a kept function: %d, %v", x, err)
	}
	d.exec(`DROP TABLE public.uses_kept`)
	d.exec(`DROP FUNCTION switchboard.kept()`)
	if after := schemaCode(d); !slices.Equal(before, after) {
		t.Fatalf("install changed the code:\nbefore %v\nafter  %v", before, after)
	}

	// An object outside the package that depends on a package view no longer stops the install
	// (the view is replaced in place), and a failed install leaves the database as it was.
	d.exec(`CREATE FUNCTION switchboard.gone() RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	d.exec(`CREATE VIEW public.mine AS SELECT * FROM switchboard.dead_letters`)
	if _, err := db.MigrateWith(ctx(), conn, db.Options{Reinstall: true}); err != nil {
		t.Fatalf("install with a view on a package view: %v", err)
	}
	d.exec(`CREATE FUNCTION switchboard.gone() RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	broken := testdb.ChangedCode(t, "views.sql", "CREATE OR REPLACE VIEW switchboard.dead_letters AS", "CREATE OR REPLACE VIEW switchboard.dead_letters AS SELECT nonsense;\nSELECT")
	if _, err := db.MigrateWith(ctx(), conn, db.Options{Code: broken}); err == nil {
		t.Fatal("a broken package installed")
	}
	if got := names(d, `SELECT proname::text FROM pg_proc WHERE proname = 'gone'`); len(got) != 1 {
		t.Fatalf("failed install was not rolled back: %v", got)
	}
}
