package sqltest

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

// calledFile lists the calls into SQL that the released server makes (its runtime entry
// points), one a line: `switchboard.name(argument types) returns result`. See docs/sql.md,
// "Expand, then contract": a line is added when the server starts calling a function, and
// removed one release after the server stopped calling it.
const calledFile = "testdata/called.txt"

// describeResult is a routine's result, with the columns of OUT parameters spelled out
// (pg_get_function_result says only "record" for them).
const describeResult = `
	CASE WHEN 'o' = ANY (p.proargmodes::text[]) THEN
	     'record(' || (SELECT string_agg(p.proargnames[i] || ' ' || format_type(p.proallargtypes[i], NULL), ', ' ORDER BY i)
	                     FROM generate_subscripts(p.proargmodes, 1) i WHERE p.proargmodes[i] = 'o') || ')'
	     ELSE pg_get_function_result(p.oid) END`

// Expand, then contract: every call the released server makes still resolves to exactly one
// routine with the same result, which the runtime may execute (a new parameter needs a
// default; a changed result needs a new function, the old one kept for a release). And the
// list is complete: every runtime entry point of this package is on it.
func TestReleasedCallsStillResolve(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	f, err := os.Open(calledFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var listed []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		call, result, ok := strings.Cut(line, " returns ")
		open := strings.IndexByte(call, '(')
		if !ok || open < 0 || !strings.HasSuffix(call, ")") {
			t.Fatalf("%s: malformed line %q", calledFile, line)
		}
		listed = append(listed, call)
		name := strings.TrimPrefix(call[:open], "switchboard.")
		types := []string{}
		if args := call[open+1 : len(call)-1]; args != "" {
			types = strings.Split(args, ",")
		}
		// The routines a call with these argument types reaches: the same leading types, the
		// rest with defaults.
		rows := names(d, `
			SELECT p.oid::regprocedure::text || ' returns ' || `+describeResult+`
			  FROM pg_proc p
			 WHERE p.pronamespace = 'switchboard'::regnamespace AND p.proname = $1
			   AND p.pronargs >= cardinality($2::regtype[]) AND p.pronargs - p.pronargdefaults <= cardinality($2::regtype[])
			   AND coalesce((SELECT array_agg(p.proargtypes[i] ORDER BY i)
			                   FROM generate_series(0, cardinality($2::regtype[]) - 1) i), '{}') = $2::regtype[]::oid[]
			   AND has_function_privilege('switchboard_runtime', p.oid, 'EXECUTE')`, name, types)
		switch {
		case len(rows) == 0:
			t.Errorf("the released server calls %s: no routine the runtime may execute takes it (keep the old signature for a release)", call)
		case len(rows) > 1:
			t.Errorf("the released server calls %s: ambiguous between %v", call, rows)
		case strings.SplitN(rows[0], " returns ", 2)[1] != result:
			t.Errorf("the released server calls %s returns %s; now %s", call, result, rows[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	current := names(d, `SELECT p.oid::regprocedure::text FROM pg_proc p
	                      WHERE p.pronamespace = 'switchboard'::regnamespace
	                        AND has_function_privilege('switchboard_runtime', p.oid, 'EXECUTE') ORDER BY 1`)
	for _, c := range current {
		if !slices.Contains(listed, c) {
			var line string
			_ = d.QueryRow(ctx(), `SELECT p.oid::regprocedure::text || ' returns ' || `+describeResult+`
			                         FROM pg_proc p WHERE p.oid = $1::regprocedure`, c).Scan(&line)
			t.Errorf("runtime entry point %s is not in %s; add the line:\n%s", c, calledFile, line)
		}
	}
}
