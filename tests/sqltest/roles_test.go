package sqltest

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const insufficientPrivilege = "42501"

// previousRelease are entry points the server no longer calls but the previous release's does:
// the runtime keeps them for one release, so a rolling upgrade loses no call (expand and
// contract; grants.sql says which replaced which).
var previousRelease = []string{"webhook_by_token", "endpoint_resolve", "events_outbox_done_many"}

// serverSQLFunctions lists the switchboard functions named in the SQL of the server's Go code
// (string literals of server/; tests, the vendored SDK and the CLI's queries excluded: those are
// server/store/operator.go, run as the operator's login, not as the runtime).
func serverSQLFunctions(t *testing.T) []string {
	t.Helper()
	re := regexp.MustCompile(`switchboard\.(\w+)\(`)
	seen := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("../../server", func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && e.Name() == "third_party" {
			return filepath.SkipDir
		}
		// server/store/operator*.go: the operator CLI's calls, made as the owner, not the runtime.
		if e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.HasPrefix(e.Name(), "operator") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, err := strconv.Unquote(lit.Value)
				if err == nil {
					for _, m := range re.FindAllStringSubmatch(s, -1) {
						seen[m[1]] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sqlstateOf(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// as returns a connection of the test database that runs as role.
func (d *DB) as(role string) *pgx.Conn {
	d.t.Helper()
	c := connect(d.t, d.URL)
	if _, err := c.Exec(ctx(), "SET ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
		d.t.Fatal(err)
	}
	return c
}

// The runtime role may execute exactly the functions the server's SQL names (each SECURITY
// DEFINER with a pinned search_path, but setting(), which reads as the caller), and read no
// table but the tunables.
func TestRuntimePrivileges(t *testing.T) {
	t.Parallel()
	d := fresh(t)

	granted := names(d, `
		SELECT p.proname::text FROM pg_proc p
		 WHERE p.pronamespace = 'switchboard'::regnamespace
		   AND has_function_privilege('switchboard_runtime', p.oid, 'EXECUTE')
		 ORDER BY 1`)
	want := append(serverSQLFunctions(t), previousRelease...)
	slices.Sort(want)
	if !slices.Equal(granted, want) {
		t.Errorf("switchboard_runtime may execute %v\n  the server calls %v", granted, want)
	}
	public := names(d, `
		SELECT p.oid::regprocedure::text FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		 WHERE p.pronamespace = 'switchboard'::regnamespace AND a.grantee = 0`)
	if len(public) > 0 {
		t.Errorf("PUBLIC may execute %v", public)
	}
	// coalesce: with no proconfig at all (search_path unpinned) the ANY is NULL, not false.
	unpinned := names(d, `
		SELECT p.proname::text FROM pg_proc p
		 WHERE p.pronamespace = 'switchboard'::regnamespace
		   AND has_function_privilege('switchboard_runtime', p.oid, 'EXECUTE') AND p.proname <> 'setting'
		   AND NOT coalesce(p.prosecdef AND 'search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)`)
	if len(unpinned) > 0 {
		t.Errorf("runtime entry points without SECURITY DEFINER and a pinned search_path: %v", unpinned)
	}

	ep := d.vend("alice", "worker", "inbox")
	d.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{github}', webhook_queues = '{inbox}' WHERE id = $1`, ep)
	d.exec(`SELECT switchboard.webhook_create($1, 'github', 'inbox', repeat('t', 40), 'shh')`, ep)
	rt := d.as("switchboard_runtime")
	for _, sql := range []string{
		`SELECT signing_secret FROM switchboard.webhooks`,
		`SELECT count(*) FROM switchboard.webhooks`,
		`SELECT count(*) FROM switchboard.todos`,
		`SELECT count(*) FROM switchboard.endpoints`,
		`UPDATE switchboard.settings SET value = value`,
		`SELECT switchboard.create_todo('` + ep + `', 'inbox', 'x')`,
		`SELECT switchboard.endpoint_revoke('` + ep + `')`,
	} {
		if _, err := rt.Exec(ctx(), sql); sqlstateOf(err) != insufficientPrivilege {
			t.Errorf("as switchboard_runtime, %s: %v; want SQLSTATE 42501", sql, err)
		}
	}
	// What the server does works: a claim through an entry point, the doorbell's setting.
	var empty bool
	if err := rt.QueryRow(ctx(), `SELECT (switchboard.claim_next($1) ->> 'empty')::boolean`, ep).Scan(&empty); err != nil || !empty {
		t.Fatalf("claim_next as runtime: %v %v", empty, err)
	}
	var ms float64
	if err := rt.QueryRow(ctx(), `SELECT switchboard.setting('doorbell_window_ms')::float8`).Scan(&ms); err != nil || ms <= 0 {
		t.Fatalf("setting as runtime: %v %v", ms, err)
	}
}

// The DBA role reads every table and view but not the webhook secrets, and changes nothing.
func TestDBARoleReadsAllButSecrets(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	ep := d.vend("alice", "worker", "inbox")
	d.create(ep, "inbox", "x")
	dba := d.as("switchboard_dba")

	for _, rel := range names(d, `SELECT c.oid::regclass::text FROM pg_class c
	                               WHERE c.relnamespace = 'switchboard'::regnamespace AND c.relkind IN ('r', 'v')
	                                 AND c.relname NOT IN ('webhooks', 'event_hooks', 'event_outbox')`) {
		if _, err := dba.Exec(ctx(), "SELECT * FROM "+rel+" LIMIT 1"); err != nil {
			t.Errorf("as switchboard_dba, SELECT * FROM %s: %v", rel, err)
		}
	}
	if _, err := dba.Exec(ctx(), `SELECT id, endpoint_id, source_type, target_queue, rules, deleted_at, secret_source, previous_secret_until FROM switchboard.webhooks`); err != nil {
		t.Errorf("as switchboard_dba, the webhooks' other columns: %v", err)
	}
	for _, sql := range []string{
		`SELECT signing_secret FROM switchboard.webhooks`,
		`SELECT ingest_token FROM switchboard.webhooks`,
		`SELECT previous_secret FROM switchboard.webhooks`,
		`SELECT secret FROM switchboard.event_hooks`,
		`SELECT previous_secret FROM switchboard.event_hooks`,
		`SELECT secret FROM switchboard.event_outbox`,
		`SELECT * FROM switchboard.webhooks`,
		`UPDATE switchboard.settings SET value = value`,
		`DELETE FROM switchboard.todos`,
		`SELECT switchboard.claim_next('` + ep + `')`,
		`SELECT switchboard.reap()`,
	} {
		if _, err := dba.Exec(ctx(), sql); sqlstateOf(err) != insufficientPrivilege {
			t.Errorf("as switchboard_dba, %s: %v; want SQLSTATE 42501", sql, err)
		}
	}
}
