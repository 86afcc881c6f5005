package cli_test

import (
	"context"
	"crypto/sha256"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"switchboard/tests/testdb"
)

// sbEnv runs the binary with extra environment (after the defaults, so it wins); an entry
// "KEY=" removes KEY.
func sbEnv(t *testing.T, dsn string, extra []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	base := env(dsn)
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		out := base[:0]
		for _, b := range base {
			if !strings.HasPrefix(b, k+"=") {
				out = append(out, b)
			}
		}
		base = out
		if v != "" {
			base = append(base, kv)
		}
	}
	cmd.Env = base
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	r := result{stdout: o.String(), stderr: e.String()}
	if x, ok := err.(*exec.ExitError); ok {
		r.code = x.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// setup: a human, an endpoint with queue inbox, and its id.
func opsSetup(t *testing.T) (string, string, obj) {
	dsn := testdb.New(t)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	e := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "inbox,other", "--json")
	return dsn, e["endpoint_id"].(string), e
}

func push(t *testing.T, dsn, ep, queue, title string) string {
	t.Helper()
	return ok[obj](t, dsn, "todo", "push", "--endpoint", ep, "--queue", queue, "--title", title, "--json")["id"].(string)
}

// kill makes a dead letter through SQL: the last attempt fails.
func kill(t *testing.T, dsn, ep, id string) {
	t.Helper()
	conn := db(t, dsn)
	exec1(t, conn, `UPDATE switchboard.todos SET max_attempts = 1 WHERE id = $1`, id)
	exec1(t, conn, `SELECT switchboard.claim($1, $2)`, ep, id)
	exec1(t, conn, `SELECT switchboard.fail($1, $2, '{"error":"boom"}')`, ep, id)
}

func TestEndpointRotate(t *testing.T) {
	dsn, ep, e := opsSetup(t)
	conn := db(t, dsn)
	id := push(t, dsn, ep, "inbox", "kept")
	resolves := func(cred string) bool {
		sum := sha256.Sum256([]byte(cred))
		return scalar[int](t, conn, `SELECT count(*) FROM switchboard.endpoint_resolve($1)`, sum[:]) == 1
	}
	r := ok[obj](t, dsn, "endpoint", "rotate", e["slug"].(string), "--json")
	if r["endpoint_id"] != ep || r["slug"] != e["slug"] || r["mcp_url"] != e["mcp_url"] || !credentialRE.MatchString(r["credential"].(string)) ||
		r["credential"] == e["credential"] || r["old_credential_until"] != nil {
		t.Fatalf("rotate = %v", r)
	}
	if resolves(e["credential"].(string)) || !resolves(r["credential"].(string)) {
		t.Fatal("after rotate the old credential resolves or the new one does not")
	}
	if s := scalar[string](t, conn, `SELECT state FROM switchboard.todos WHERE id = $1`, id); s != "pending" {
		t.Fatalf("todo %s after rotate", s)
	}
	g := ok[obj](t, dsn, "endpoint", "rotate", ep, "--grace", "10m", "--json")
	if g["old_credential_until"] == nil || !resolves(r["credential"].(string)) || !resolves(g["credential"].(string)) {
		t.Fatalf("rotate --grace: %v", g)
	}
	h := sb(t, dsn, "endpoint", "rotate", ep)
	if h.code != 0 || !strings.Contains(h.stdout, "shown once") || !strings.Contains(h.stdout, "stops now") {
		t.Fatalf("human rotate: %d %q", h.code, h.stdout)
	}
	if msg := refused(t, dsn, "endpoint", "rotate", ep, "--grace", "-1m"); !strings.Contains(msg, "--grace") {
		t.Errorf("negative grace: %s", msg)
	}
	refused(t, dsn, "endpoint", "rotate", ep, "--grace", "soon")
	refused(t, dsn, "endpoint", "rotate", "nope")
	ok[obj](t, dsn, "endpoint", "revoke", ep, "--json")
	if msg := refused(t, dsn, "endpoint", "rotate", ep); !strings.Contains(msg, "revoked") {
		t.Errorf("rotate of a revoked endpoint: %s", msg)
	}
}

func TestTodoDeadRedriveCancel(t *testing.T) {
	dsn, ep, e := opsSetup(t)
	conn := db(t, dsn)
	a, b, c := push(t, dsn, ep, "inbox", "a"), push(t, dsn, ep, "inbox", "b"), push(t, dsn, ep, "other", "c")
	for _, id := range []string{a, b, c} {
		kill(t, dsn, ep, id)
	}
	exec1(t, conn, `UPDATE switchboard.todos SET completed_at = now() - interval '3 hours' WHERE id = $1`, b)

	dead := ok[[]obj](t, dsn, "todo", "dead", "--endpoint", e["slug"].(string), "--json")
	if len(dead) != 3 || dead[0]["id"] == b || num(t, dead[0]["redrives"]) != 0 {
		t.Fatalf("todo dead = %v", dead)
	}
	if got := ok[[]obj](t, dsn, "todo", "dead", "--endpoint", ep, "--queue", "other", "--json"); len(got) != 1 || got[0]["id"] != c {
		t.Fatalf("todo dead --queue other = %v", got)
	}
	if h := sb(t, dsn, "todo", "dead", "--endpoint", ep); h.code != 0 || !strings.Contains(h.stdout, "3 dead letter(s)") || !strings.Contains(h.stdout, "boom") {
		t.Fatalf("human todo dead: %q", h.stdout)
	}
	refused(t, dsn, "todo", "dead")
	refused(t, dsn, "todo", "dead", "--endpoint", "nope")

	// One id; then a queue, only the ones since an hour ago.
	r := ok[obj](t, dsn, "todo", "redrive", c, "--json")
	if num(t, r["redriven"]) != 1 || !strings.HasPrefix(r["by"].(string), "operator:") {
		t.Fatalf("redrive by id = %v", r)
	}
	r = ok[obj](t, dsn, "todo", "redrive", "--endpoint", ep, "--queue", "inbox", "--since", "1h", "--json")
	if ids := strs(t, r["ids"]); num(t, r["redriven"]) != 1 || len(ids) != 1 || ids[0] != a {
		t.Fatalf("redrive --since 1h = %v, want only %s", r, a)
	}
	if s := scalar[string](t, conn, `SELECT state || ':' || attempt || ':' || redrives FROM switchboard.todos WHERE id = $1`, a); s != "pending:0:1" {
		t.Fatalf("redriven todo %s", s)
	}
	r = ok[obj](t, dsn, "todo", "redrive", "--endpoint", ep, "--queue", "inbox", "--since", time.Now().Add(-5*time.Hour).UTC().Format(time.RFC3339), "--json")
	if num(t, r["redriven"]) != 1 {
		t.Fatalf("redrive --since RFC 3339 = %v", r)
	}
	if msg := refused(t, dsn, "todo", "redrive", a); !strings.Contains(msg, "pending") {
		t.Errorf("redrive of a pending todo: %s", msg)
	}
	for _, args := range [][]string{
		{"todo", "redrive"},
		{"todo", "redrive", a, "--endpoint", ep},
		{"todo", "redrive", "--endpoint", ep},
		{"todo", "redrive", "--endpoint", ep, "--queue", "inbox", "--since", "yesterday"},
		{"todo", "redrive", "not-a-uuid"},
	} {
		refused(t, dsn, args...)
	}

	// cancel: pending and failed go; claimed is a conflict that says so.
	ok[obj](t, dsn, "todo", "cancel", a, "--json")
	claimed := push(t, dsn, ep, "inbox", "claimed")
	exec1(t, conn, `SELECT switchboard.claim($1, $2)`, ep, claimed)
	if msg := refused(t, dsn, "todo", "cancel", claimed); !strings.Contains(msg, "claimed") {
		t.Errorf("cancel of a claimed todo: %s", msg)
	}
	if msg := refused(t, dsn, "todo", "cancel", a); !strings.Contains(msg, "cancelled") {
		t.Errorf("cancel twice: %s", msg)
	}
	refused(t, dsn, "todo", "cancel", "00000000-0000-0000-0000-000000000000")
	if s := scalar[string](t, conn, `SELECT state FROM switchboard.todos WHERE id = $1`, a); s != "cancelled" {
		t.Fatalf("cancelled todo is %s", s)
	}
}

func TestPurgeCommand(t *testing.T) {
	dsn, ep, _ := opsSetup(t)
	conn := db(t, dsn)
	ids := []string{push(t, dsn, ep, "inbox", "old"), push(t, dsn, ep, "inbox", "young")}
	for _, id := range ids {
		exec1(t, conn, `SELECT switchboard.claim($1, $2)`, ep, id)
		exec1(t, conn, `SELECT switchboard.complete($1, $2)`, ep, id)
	}
	exec1(t, conn, `UPDATE switchboard.todos SET completed_at = now() - interval '8 days' WHERE id = $1`, ids[0])
	dry := ok[obj](t, dsn, "purge", "--dry-run", "--json")
	if num(t, dry["todos_done"]) != 1 || dry["dry_run"] != true {
		t.Fatalf("purge --dry-run = %v", dry)
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.todos`); n != 2 {
		t.Fatalf("dry run deleted: %d left", n)
	}
	p := ok[obj](t, dsn, "purge", "--json")
	if num(t, p["todos_done"]) != 1 || num(t, p["batches"]) != 1 {
		t.Fatalf("purge = %v", p)
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.todos WHERE id = $1`, ids[1]); n != 1 {
		t.Fatal("purge deleted a todo within retention")
	}
}

// Error messages name the flag and the valid values.
func TestErrorsExplainThemselves(t *testing.T) {
	dsn, ep, _ := opsSetup(t)
	ok[obj](t, dsn, "human", "add", "bob", "--json")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"friend", "request", "--from", "alice", "--to", "carol"}, []string{`--to "carol"`}},
		{[]string{"friend", "request", "--from", "zed", "--to", "bob"}, []string{`--from "zed"`}},
		{[]string{"friend", "request", "--from", "zed", "--to", "carol"}, []string{`--from "zed"`, `--to "carol"`}},
		{[]string{"settings", "set", "max_attempt", "3"}, []string{`"max_attempt"`, "max_attempts", "retain_done_days"}},
		{[]string{"todo", "push", "--endpoint", ep, "--queue", "inbox", "--title", "x", "--payload", `{"a":1,}`}, []string{"at byte 8"}},
		{[]string{"todo", "push", "--endpoint", ep, "--queue", "inbox", "--title", "x", "--payload", `{"a":`}, []string{"ends early"}},
		{[]string{"todo", "push", "--endpoint", ep, "--queue", "inbox", "--titel", "x"}, []string{"unknown flag -titel", "did you mean --title?"}},
		{[]string{"endpoint", "list", "--humans", "x"}, []string{"did you mean --human?"}},
		{[]string{"endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "q", "--webhook-max", "2"},
			[]string{"--webhook-sources", "github, gitea", "--webhook-queues"}},
		{[]string{"endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "q", "--webhook-max", "2", "--webhook-sources", "github"},
			[]string{"--webhook-queues (any of --queues: q)"}},
	} {
		msg := refused(t, dsn, c.args...)
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("switchboard %s: %q lacks %q", strings.Join(c.args, " "), msg, w)
			}
		}
	}
	// A friend edge that cannot make the move says what it is.
	f := ok[obj](t, dsn, "friend", "request", "--from", "alice", "--to", "bob", "--json")
	ok[obj](t, dsn, "friend", "approve", f["id"].(string), "--json")
	if msg := refused(t, dsn, "friend", "deny", f["id"].(string)); !strings.Contains(msg, "is approved") || !strings.Contains(msg, "only a pending edge") {
		t.Errorf("deny of an approved edge: %s", msg)
	}

	// Help on request, exit 0, on stdout; help tells which commands read DATABASE_URL.
	for _, args := range [][]string{{"friend", "-h"}, {"todo", "--help"}, {"help"}} {
		r := sb(t, "", args...)
		if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "usage: switchboard") {
			t.Errorf("switchboard %s: %d %q %q", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	if r := sb(t, "", "todo", "--help"); !strings.Contains(r.stdout, "todo redrive") || !strings.Contains(r.stdout, "todo cancel") {
		t.Errorf("todo --help: %s", r.stdout)
	}
	if r := sb(t, "", "help"); !strings.Contains(r.stdout, "every command but help connects to it (serve too)") {
		t.Errorf("help on DATABASE_URL: %s", r.stdout)
	}
	// vend says which verbs it granted, implied ones included.
	r := sb(t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "v", "--queues", "q", "--verbs", "list_todos,claim_next")
	if r.code != 0 || !strings.Contains(r.stdout, "(implied: get_todo)") {
		t.Errorf("vend output: %q", r.stdout)
	}
}

// vend prints the URL the running server recorded, unless the CLI has SWITCHBOARD_BASE_URL.
func TestVendPrintsServedURL(t *testing.T) {
	dsn, _, _ := opsSetup(t)
	conn := db(t, dsn)
	exec1(t, conn, `SELECT switchboard.record_base_url('http://127.0.0.1:18555')`)
	r := sbEnv(t, dsn, []string{"SWITCHBOARD_BASE_URL="}, "endpoint", "vend", "--human", "alice", "--agent", "u", "--queues", "q", "--json")
	e := decodeOne[obj](t, r.stdout)
	if r.code != 0 || !strings.HasPrefix(e["mcp_url"].(string), "http://127.0.0.1:18555/mcp/") {
		t.Fatalf("vend with a recorded URL: %d %v %s", r.code, e["mcp_url"], r.stderr)
	}
	e = ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "u", "--queues", "q", "--json")
	if !strings.HasPrefix(e["mcp_url"].(string), baseURL+"/mcp/") {
		t.Fatalf("the CLI's own SWITCHBOARD_BASE_URL must win: %v", e["mcp_url"])
	}
}

// A second `make run` (demo --check-addr) stops before vending when the port is taken.
func TestDemoBusyPort(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	r := sbEnv(t, dsn, []string{"SWITCHBOARD_ADDR=" + ln.Addr().String()}, "demo", "--check-addr")
	if r.code != 2 || !strings.Contains(r.stderr, "port "+port+" is busy") || !strings.Contains(r.stderr, "SWITCHBOARD_ADDR=") {
		t.Fatalf("demo on a busy port: %d %q", r.code, r.stderr)
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.endpoints`); n != 0 {
		t.Fatalf("%d endpoints vended on a busy port", n)
	}
	ln.Close()
	// make run: the URL is the one the server about to start will serve, not the last one's.
	exec1(t, conn, `SELECT switchboard.record_base_url('http://127.0.0.1:1')`)
	r = sbEnv(t, dsn, []string{"SWITCHBOARD_ADDR=" + ln.Addr().String(), "SWITCHBOARD_BASE_URL="}, "demo", "--check-addr", "--json")
	if d := decodeOne[obj](t, r.stdout); r.code != 0 || !strings.HasPrefix(d["mcp_url"].(string), "http://"+ln.Addr().String()+"/mcp/") {
		t.Fatalf("demo on a free port: %d %v %q", r.code, d["mcp_url"], r.stderr)
	}
}
