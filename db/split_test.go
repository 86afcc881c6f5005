package db

import (
	"slices"
	"testing"
)

func TestSplitStatements(t *testing.T) {
	sql := `SET x = 1;
-- a comment; with a semicolon
CREATE FUNCTION f() RETURNS text LANGUAGE sql AS $$ SELECT 'a;b' $$;
CREATE FUNCTION g() RETURNS text LANGUAGE plpgsql AS $fn$ BEGIN RETURN $$x;$$; END $fn$;
SELECT 'it''s; fine', "we;ird", E'back\'slash;', $1;
/* block /* nested; */ still; */ SELECT 2;
;  -- trailing
`
	got := splitStatements(sql)
	want := []string{
		"SET x = 1",
		"-- a comment; with a semicolon\nCREATE FUNCTION f() RETURNS text LANGUAGE sql AS $$ SELECT 'a;b' $$",
		"CREATE FUNCTION g() RETURNS text LANGUAGE plpgsql AS $fn$ BEGIN RETURN $$x;$$; END $fn$",
		`SELECT 'it''s; fine', "we;ird", E'back\'slash;', $1`,
		"/* block /* nested; */ still; */ SELECT 2",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("split:\n%q\nwant\n%q", got, want)
	}
	if s := stripComments(want[4]); s != "SELECT 2" {
		t.Fatalf("stripComments: %q", s)
	}
}
