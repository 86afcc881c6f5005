package cli_test

import (
	"crypto/sha256"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"switchboard/tests/testdb"
)

var (
	uuidRE       = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	credentialRE = regexp.MustCompile(`^sbk_[A-Za-z0-9_-]{43}$`)
)

func TestMigrateOnMigratedDatabase(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	want := scalar[int](t, conn, `SELECT version FROM public.switchboard_schema_version`)
	got := ok[obj](t, dsn, "migrate", "--json")
	if len(got) != 4 || num(t, got["applied"]) != 0 || num(t, got["version"]) != want ||
		got["code"] != "unchanged" || num(t, got["attempts"]) != 1 {
		t.Fatalf("migrate = %v, want applied 0, version %d, code unchanged, attempts 1", got, want)
	}
	// --reinstall installs the same package again.
	if got := ok[obj](t, dsn, "migrate", "--json", "--reinstall"); got["code"] != "installed" {
		t.Fatalf("migrate --reinstall = %v, want code installed", got)
	}
}

func TestHumanAdd(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	h := ok[obj](t, dsn, "human", "add", "alice", "--json")
	if len(h) != 3 || h["name"] != "alice" || h["operator"] != false || !uuidRE.MatchString(h["id"].(string)) {
		t.Fatalf("human add = %v", h)
	}
	if id := scalar[string](t, conn, `SELECT id::text FROM switchboard.humans WHERE name = 'alice'`); id != h["id"] {
		t.Fatalf("stored id %s, printed %v", id, h["id"])
	}
	before := rowCounts(t, conn)
	refused(t, dsn, "human", "add", "alice") // name taken
	refused(t, dsn, "human", "add", "")      // invalid name
	if after := rowCounts(t, conn); after != before {
		t.Fatalf("refused human add wrote: %s -> %s", before, after)
	}
}

// Operator humans (console: they see everyone's rows) and one-time console sign-in links.
func TestHumanOperatorAndInvite(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	if h := ok[obj](t, dsn, "human", "add", "op", "--operator", "--json"); h["operator"] != true {
		t.Fatalf("human add --operator = %v", h)
	}
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	if h := ok[obj](t, dsn, "human", "set-operator", "alice", "--json"); h["operator"] != true {
		t.Fatalf("set-operator = %v", h)
	}
	if h := ok[obj](t, dsn, "human", "set-operator", "alice", "--off", "--json"); h["operator"] != false {
		t.Fatalf("set-operator --off = %v", h)
	}
	if !scalar[bool](t, conn, `SELECT operator FROM switchboard.humans WHERE name = 'op'`) {
		t.Fatal("op is not an operator")
	}
	inv := ok[obj](t, dsn, "human", "invite", "alice", "--ttl", "2h", "--json")
	u, _ := inv["url"].(string)
	m := regexp.MustCompile(`^http://\S+/console/invite/([A-Za-z0-9_-]{43})$`).FindStringSubmatch(u)
	if len(inv) != 3 || inv["human"] != "alice" || m == nil {
		t.Fatalf("human invite = %v", inv)
	}
	exp, err := time.Parse(time.RFC3339, inv["expires_at"].(string))
	if err != nil || exp.Before(time.Now().Add(time.Hour)) || exp.After(time.Now().Add(3*time.Hour)) {
		t.Fatalf("expires_at %v: %v", inv["expires_at"], err)
	}
	// Stored hashed: the token's sha256, never the token.
	sum := sha256.Sum256([]byte(m[1]))
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.console_invites WHERE token_hash = $1 AND used_at IS NULL`, sum[:]); n != 1 {
		t.Fatalf("%d invites stored under the token's sha256", n)
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.console_invites WHERE encode(token_hash, 'escape') LIKE '%' || $1 || '%'`, m[1]); n != 0 {
		t.Fatal("the invite token is stored in clear")
	}
	before := rowCounts(t, conn)
	refused(t, dsn, "human", "invite", "nobody")
	refused(t, dsn, "human", "invite", "alice", "--ttl", "0s")
	refused(t, dsn, "human", "set-operator", "nobody")
	if after := rowCounts(t, conn); after != before {
		t.Fatalf("refused commands wrote: %s -> %s", before, after)
	}
}

func TestEndpointVendEveryFlag(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	human := ok[obj](t, dsn, "human", "add", "alice", "--json")

	e := ok[obj](t, dsn, "endpoint", "vend", "--json", "--human", "alice", "--agent", "Build Bot",
		"--queues", "b,a", "--verbs", "list_todos,claim_next,complete",
		"--webhook-max", "3", "--webhook-sources", "github,generic", "--webhook-queues", "a",
		"--lease-ttl", "120")
	for _, k := range []string{"endpoint_id", "slug", "agent_id", "human_id", "mcp_url", "credential", "queues", "verbs", "ceiling"} {
		if _, ok := e[k]; !ok {
			t.Errorf("vend output lacks %q: %v", k, keys(e))
		}
	}
	slug := e["slug"].(string)
	if !regexp.MustCompile(`^build-bot-[0-9a-f]{8}$`).MatchString(slug) {
		t.Errorf("slug %q", slug)
	}
	if e["human_id"] != human["id"] || !uuidRE.MatchString(e["endpoint_id"].(string)) || !uuidRE.MatchString(e["agent_id"].(string)) {
		t.Errorf("ids: %v", e)
	}
	if e["mcp_url"] != baseURL+"/mcp/"+slug {
		t.Errorf("mcp_url %v", e["mcp_url"])
	}
	cred := e["credential"].(string)
	if !credentialRE.MatchString(cred) {
		t.Errorf("credential %q", cred)
	}
	if got := strs(t, e["queues"]); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("queues %v", got)
	}
	// list_todos implies get_todo; nothing else is implied.
	if got := slices.Sorted(slices.Values(strs(t, e["verbs"]))); !slices.Equal(got, []string{"claim_next", "complete", "get_todo", "list_todos"}) {
		t.Errorf("verbs %v", got)
	}
	ceiling := e["ceiling"].(obj)
	if num(t, ceiling["max"]) != 3 || !slices.Equal(strs(t, ceiling["allowed_source_types"]), []string{"generic", "github"}) ||
		!slices.Equal(strs(t, ceiling["allowed_queues"]), []string{"a"}) {
		t.Errorf("ceiling %v", ceiling)
	}
	if num(t, e["lease_ttl_seconds"]) != 120 {
		t.Errorf("lease_ttl_seconds %v", e["lease_ttl_seconds"])
	}

	// Only the hash and a display prefix are stored; the credential resolves to this endpoint.
	sum := sha256.Sum256([]byte(cred))
	var hash []byte
	var prefix string
	var ttl int
	if err := conn.QueryRow(t.Context(), `SELECT credential_hash, credential_prefix, lease_ttl_seconds FROM switchboard.endpoints WHERE id = $1`,
		e["endpoint_id"]).Scan(&hash, &prefix, &ttl); err != nil {
		t.Fatal(err)
	}
	if string(hash) != string(sum[:]) || prefix != cred[:12] || ttl != 120 {
		t.Errorf("stored hash/prefix/ttl mismatch: prefix %q ttl %d", prefix, ttl)
	}
	if got := scalar[string](t, conn, `SELECT endpoint_id::text FROM switchboard.endpoint_resolve($1)`, sum[:]); got != e["endpoint_id"] {
		t.Errorf("credential resolves to %s", got)
	}

	// Defaults: every verb, ceiling max 0, no lease ttl. The agent is reused, the slug is new.
	all := scalar[int](t, conn, `SELECT count(*) FROM switchboard.verbs`)
	for _, verbs := range [][]string{nil, {"--verbs", "all"}} {
		d := ok[obj](t, dsn, append([]string{"endpoint", "vend", "--human", "alice", "--agent", "Build Bot", "--queues", "a", "--json"}, verbs...)...)
		if len(strs(t, d["verbs"])) != all {
			t.Errorf("default verbs %v, want all %d", d["verbs"], all)
		}
		c := d["ceiling"].(obj)
		if num(t, c["max"]) != 0 || len(strs(t, c["allowed_source_types"])) != 0 || len(strs(t, c["allowed_queues"])) != 0 {
			t.Errorf("default ceiling %v", c)
		}
		if d["lease_ttl_seconds"] != nil {
			t.Errorf("default lease_ttl_seconds %v", d["lease_ttl_seconds"])
		}
		if d["agent_id"] != e["agent_id"] || d["slug"] == e["slug"] || d["credential"] == e["credential"] {
			t.Errorf("second vend: agent %v slug %v", d["agent_id"], d["slug"])
		}
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.agents`); n != 1 {
		t.Errorf("%d agents, want 1", n)
	}

	// The human-readable form shows the URL and the credential too.
	r := sb(t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "other", "--queues", "a")
	if r.code != 0 || !strings.Contains(r.stdout, baseURL+"/mcp/other-") || !regexp.MustCompile(`sbk_[A-Za-z0-9_-]{43}`).MatchString(r.stdout) {
		t.Errorf("human vend output: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestEndpointListNeverShowsCredential(t *testing.T) {
	dsn := testdb.New(t)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	ok[obj](t, dsn, "human", "add", "bob", "--json")
	var creds []string
	for _, h := range []string{"alice", "alice", "bob"} {
		e := ok[obj](t, dsn, "endpoint", "vend", "--human", h, "--agent", "worker", "--queues", "q", "--json")
		creds = append(creds, e["credential"].(string))
	}
	r := sb(t, dsn, "endpoint", "list", "--json")
	list := decodeOne[[]obj](t, r.stdout)
	if r.code != 0 || len(list) != 3 {
		t.Fatalf("endpoint list: %d %v", r.code, list)
	}
	for _, e := range list {
		for _, k := range []string{"credential", "credential_hash"} {
			if _, has := e[k]; has {
				t.Errorf("list entry has %q", k)
			}
		}
		if e["state"] != "active" || !uuidRE.MatchString(e["endpoint_id"].(string)) || e["slug"] == nil {
			t.Errorf("list entry %v", e)
		}
	}
	human := sb(t, dsn, "endpoint", "list")
	for _, c := range creds {
		if strings.Contains(r.stdout, c) || strings.Contains(human.stdout, c) {
			t.Errorf("list shows a credential")
		}
	}
	if strings.Contains(r.stdout, "credential_hash") || !strings.Contains(human.stdout, "worker-") {
		t.Errorf("list output: %s", human.stdout)
	}
	if got := ok[[]obj](t, dsn, "endpoint", "list", "--human", "bob", "--json"); len(got) != 1 || got[0]["human"] != "bob" {
		t.Errorf("list --human bob = %v", got)
	}
	refused(t, dsn, "endpoint", "list", "--human", "nobody")
}

func TestEndpointRevoke(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	e1 := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "q", "--json")
	e2 := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "q", "--json")
	ep := e1["endpoint_id"].(string)
	var ids []string
	for _, title := range []string{"p1", "p2", "claimed", "done"} {
		ids = append(ids, ok[obj](t, dsn, "todo", "push", "--endpoint", ep, "--queue", "q", "--title", title, "--json")["id"].(string))
	}
	exec1(t, conn, `SELECT switchboard.claim($1, $2)`, ep, ids[2])
	exec1(t, conn, `SELECT switchboard.claim($1, $2)`, ep, ids[3])
	exec1(t, conn, `SELECT switchboard.complete($1, $2)`, ep, ids[3])

	r := ok[obj](t, dsn, "endpoint", "revoke", ep, "--json")
	if len(r) != 3 || r["endpoint_id"] != ep || r["state"] != "revoked" || num(t, r["todos_dead_lettered"]) != 3 {
		t.Fatalf("revoke by id = %v, want 3 dead-lettered (2 pending + 1 claimed)", r)
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.dead_letters WHERE result->>'error' = 'endpoint_revoked'`); n != 3 {
		t.Errorf("%d dead letters with endpoint_revoked", n)
	}
	if s := scalar[string](t, conn, `SELECT state FROM switchboard.todos WHERE id = $1`, ids[3]); s != "done" {
		t.Errorf("done todo became %s", s)
	}

	r = ok[obj](t, dsn, "endpoint", "revoke", e2["slug"].(string), "--json")
	if r["endpoint_id"] != e2["endpoint_id"] || r["state"] != "revoked" || num(t, r["todos_dead_lettered"]) != 0 {
		t.Fatalf("revoke by slug = %v", r)
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.endpoints WHERE state = 'revoked'`); n != 2 {
		t.Errorf("%d revoked endpoints", n)
	}
	before := rowCounts(t, conn)
	refused(t, dsn, "endpoint", "revoke", "no-such-slug")
	refused(t, dsn, "endpoint", "revoke", "00000000-0000-0000-0000-000000000000")
	refused(t, dsn, "todo", "push", "--endpoint", ep, "--queue", "q", "--title", "late") // endpoint not active
	if after := rowCounts(t, conn); after != before {
		t.Fatalf("refusals wrote: %s -> %s", before, after)
	}
}

func TestFriendEdges(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	for _, h := range []string{"alice", "bob", "carol"} {
		ok[obj](t, dsn, "human", "add", h, "--json")
	}
	f := ok[obj](t, dsn, "friend", "request", "--from", "alice", "--to", "bob", "--json")
	id := f["id"].(string)
	if !uuidRE.MatchString(id) || f["from_human"] != "alice" || f["to_human"] != "bob" || f["state"] != "pending" {
		t.Fatalf("friend request = %v", f)
	}
	if got := ok[obj](t, dsn, "friend", "approve", id, "--json"); len(got) != 2 || got["id"] != id || got["state"] != "approved" {
		t.Fatalf("approve = %v", got)
	}

	before := rowCounts(t, conn)
	refused(t, dsn, "friend", "approve", id) // approved -> approved is not a transition
	refused(t, dsn, "friend", "deny", id)
	refused(t, dsn, "friend", "request", "--from", "alice", "--to", "bob") // a live edge exists
	refused(t, dsn, "friend", "request", "--from", "alice", "--to", "nobody")
	refused(t, dsn, "friend", "request", "--from", "alice", "--to", "alice")
	refused(t, dsn, "friend", "approve", "not-a-uuid")
	refused(t, dsn, "friend", "approve", "00000000-0000-0000-0000-000000000000")
	if after := rowCounts(t, conn); after != before {
		t.Fatalf("refusals wrote: %s -> %s", before, after)
	}
	if s := scalar[string](t, conn, `SELECT state FROM switchboard.friend_edges WHERE id = $1`, id); s != "approved" {
		t.Fatalf("edge is %s after refused transitions", s)
	}

	if got := ok[obj](t, dsn, "friend", "revoke", id, "--json"); got["state"] != "revoked" {
		t.Fatalf("revoke = %v", got)
	}
	f2 := ok[obj](t, dsn, "friend", "request", "--from", "bob", "--to", "carol", "--json")
	if got := ok[obj](t, dsn, "friend", "deny", f2["id"].(string), "--json"); got["state"] != "denied" || got["id"] != f2["id"] {
		t.Fatalf("deny = %v", got)
	}
	refused(t, dsn, "friend", "revoke", f2["id"].(string)) // denied -> revoked is not a transition

	all := ok[[]obj](t, dsn, "friend", "list", "--json")
	if len(all) != 2 || all[0]["id"] != id || all[0]["state"] != "revoked" || all[1]["state"] != "denied" {
		t.Fatalf("friend list = %v", all)
	}
	carol := ok[[]obj](t, dsn, "friend", "list", "--human", "carol", "--json")
	if len(carol) != 1 || carol[0]["from_human"] != "bob" || carol[0]["to_human"] != "carol" {
		t.Fatalf("friend list --human carol = %v", carol)
	}
	refused(t, dsn, "friend", "list", "--human", "nobody")
}

func TestTodoPush(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	e := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "inbox,other", "--json")
	slug := e["slug"].(string)

	a := ok[obj](t, dsn, "todo", "push", "--endpoint", slug, "--queue", "inbox", "--title", "plain", "--json")
	b := ok[obj](t, dsn, "todo", "push", "--endpoint", slug, "--queue", "inbox", "--title", "plain", "--json")
	if len(a) != 2 || a["created"] != true || b["created"] != true || a["id"] == b["id"] || !uuidRE.MatchString(a["id"].(string)) {
		t.Fatalf("pushes without key: %v %v", a, b)
	}
	k1 := ok[obj](t, dsn, "todo", "push", "--endpoint", e["endpoint_id"].(string), "--queue", "other", "--title", "keyed",
		"--payload", `{"n": 1, "tags": ["x"]}`, "--key", "k-1", "--json")
	k2 := ok[obj](t, dsn, "todo", "push", "--endpoint", slug, "--queue", "other", "--title", "keyed again",
		"--payload", `{"n": 2}`, "--key", "k-1", "--json")
	if k1["created"] != true || k2["created"] != false || k1["id"] != k2["id"] {
		t.Fatalf("pushes with one key: %v %v", k1, k2)
	}
	var title, queue, source, state string
	var payload []byte
	if err := conn.QueryRow(t.Context(), `SELECT title, queue, source, state, payload FROM switchboard.todos WHERE id = $1`, k1["id"]).
		Scan(&title, &queue, &source, &state, &payload); err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	_ = json.Unmarshal(payload, &p)
	if title != "keyed" || queue != "other" || source != "operator" || state != "pending" || p["n"] != float64(1) {
		t.Fatalf("stored todo: %s %s %s %s %s", title, queue, source, state, payload)
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.todos`); n != 3 {
		t.Fatalf("%d todos, want 3", n)
	}

	before := rowCounts(t, conn)
	refused(t, dsn, "todo", "push", "--endpoint", slug, "--queue", "inbox", "--title", "x", "--payload", `{"n":`)
	refused(t, dsn, "todo", "push", "--endpoint", slug, "--queue", "elsewhere", "--title", "x")
	refused(t, dsn, "todo", "push", "--endpoint", "nope", "--queue", "inbox", "--title", "x")
	refused(t, dsn, "todo", "push", "--endpoint", slug, "--queue", "inbox")
	if after := rowCounts(t, conn); after != before {
		t.Fatalf("refusals wrote: %s -> %s", before, after)
	}
}

func TestReap(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	ep := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "q", "--json")["endpoint_id"].(string)
	push := func(title string) string {
		return ok[obj](t, dsn, "todo", "push", "--endpoint", ep, "--queue", "q", "--title", title, "--json")["id"].(string)
	}
	expired, exhausted, parked := push("expired"), push("exhausted"), push("parked")
	push("untouched")
	for _, id := range []string{expired, exhausted, parked} {
		exec1(t, conn, `SELECT switchboard.claim($1, $2)`, ep, id)
	}
	exec1(t, conn, `SELECT switchboard.fail($1, $2)`, ep, parked)
	exec1(t, conn, `UPDATE switchboard.todos SET lease_expires_at = now() - interval '1 second' WHERE id IN ($1, $2)`, expired, exhausted)
	exec1(t, conn, `UPDATE switchboard.todos SET attempt = max_attempts WHERE id = $1`, exhausted)
	exec1(t, conn, `UPDATE switchboard.todos SET next_retry_at = now() - interval '1 second' WHERE id = $1`, parked)

	got := ok[obj](t, dsn, "reap", "--json")
	if len(got) != 3 || num(t, got["requeued"]) != 1 || num(t, got["dead_lettered"]) != 1 || num(t, got["retries_released"]) != 1 {
		t.Fatalf("reap = %v, want 1/1/1", got)
	}
	states := scalar[string](t, conn, `SELECT string_agg(title || ':' || state, ' ' ORDER BY title) FROM switchboard.todos`)
	if states != "exhausted:failed expired:pending parked:pending untouched:pending" {
		t.Fatalf("states after reap: %s", states)
	}
	again := ok[obj](t, dsn, "reap", "--json")
	if num(t, again["requeued"])+num(t, again["dead_lettered"])+num(t, again["retries_released"]) != 0 {
		t.Fatalf("second reap = %v", again)
	}
}

func TestSettings(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	s := ok[obj](t, dsn, "settings", "--json")
	want := map[string]int{"backoff_base_seconds": 30, "backoff_cap_seconds": 900, "max_attempts": 5,
		"lease_default_seconds": 300, "lease_max_seconds": 86400}
	for k, v := range want {
		if num(t, s[k]) != v {
			t.Errorf("settings[%s] = %v, want %d", k, s[k], v)
		}
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.settings`); len(s) != n {
		t.Errorf("settings has %d keys, table %d", len(s), n)
	}
	after := ok[obj](t, dsn, "settings", "set", "max_attempts", "7", "--json")
	if len(after) != len(s) || num(t, after["max_attempts"]) != 7 || num(t, after["backoff_base_seconds"]) != 30 {
		t.Fatalf("settings set = %v", after)
	}
	if v := scalar[int](t, conn, `SELECT value::int FROM switchboard.settings WHERE key = 'max_attempts'`); v != 7 {
		t.Fatalf("stored max_attempts %d", v)
	}
	if got := ok[obj](t, dsn, "settings", "--json"); num(t, got["max_attempts"]) != 7 {
		t.Fatalf("settings after set = %v", got)
	}

	before := rowCounts(t, conn)
	refused(t, dsn, "settings", "set", "no_such_setting", "1")
	refused(t, dsn, "settings", "set", "max_attempts", "many")
	refused(t, dsn, "settings", "set", "max_attempts")
	refused(t, dsn, "settings", "set", "max_attempts", "0")
	refused(t, dsn, "settings", "set", "max_attempts", "2.5")
	refused(t, dsn, "settings", "set", "doorbell_enabled", "2")
	refused(t, dsn, "settings", "frob")
	if after := rowCounts(t, conn); after != before {
		t.Fatalf("refusals wrote: %s -> %s", before, after)
	}
}

// TestBadInputWritesNothing: every malformed command is refused with exit 2, one line on stderr,
// nothing on stdout, and no row changed.
func TestBadInputWritesNothing(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	slug := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "q", "--json")["slug"].(string)
	vend := []string{"endpoint", "vend", "--human", "alice", "--agent", "fresh"}
	cases := map[string][]string{
		"unknown human":         {"endpoint", "vend", "--human", "nobody", "--agent", "fresh", "--queues", "q"},
		"unknown verb":          append(slices.Clone(vend), "--queues", "q", "--verbs", "claim,frobnicate"),
		"all mixed with verbs":  append(slices.Clone(vend), "--queues", "q", "--verbs", "all,claim"),
		"empty list item":       append(slices.Clone(vend), "--queues", "a,,b"),
		"empty list":            append(slices.Clone(vend), "--queues", ""),
		"bad queue name":        append(slices.Clone(vend), "--queues", "a b"),
		"missing queues":        slices.Clone(vend),
		"empty verbs":           append(slices.Clone(vend), "--queues", "q", "--verbs", ""),
		"bad source list":       append(slices.Clone(vend), "--queues", "q", "--webhook-sources", "github,,generic"),
		"unknown source type":   append(slices.Clone(vend), "--queues", "q", "--webhook-sources", "gitlab"),
		"non-numeric max":       append(slices.Clone(vend), "--queues", "q", "--webhook-max", "five"),
		"negative max":          append(slices.Clone(vend), "--queues", "q", "--webhook-max", "-1"),
		"lease ttl out of band": append(slices.Clone(vend), "--queues", "q", "--lease-ttl", "0"),
		"unknown flag":          append(slices.Clone(vend), "--queues", "q", "--colour", "blue"),
		"stray argument":        {"human", "add", "bob", "extra"},
		"bad JSON payload":      {"todo", "push", "--endpoint", slug, "--queue", "q", "--title", "t", "--payload", "{nope}"},
		"payload 65 deep":       {"todo", "push", "--endpoint", slug, "--queue", "q", "--title", "t", "--payload", strings.Repeat("[", 65) + strings.Repeat("]", 65)},
		"payload 1e400":         {"todo", "push", "--endpoint", slug, "--queue", "q", "--title", "t", "--payload", `{"n":1e400}`},
		"bad todo queue name":   {"todo", "push", "--endpoint", slug, "--queue", "-q", "--title", "t"},
		"unknown setting":       {"settings", "set", "nope", "3"},
		"negative setting":      {"settings", "set", "max_attempts", "-3"},
		"unknown command":       {"frobnicate"},
		"unknown subcommand":    {"endpoint", "frobnicate"},
		"missing subcommand":    {"friend"},
	}
	before := rowCounts(t, conn)
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			refused(t, dsn, args...)
			if after := rowCounts(t, conn); after != before {
				t.Fatalf("wrote: %s -> %s", before, after)
			}
		})
	}
	t.Run("missing DATABASE_URL", func(t *testing.T) {
		if msg := refused(t, "", "human", "add", "bob"); !strings.Contains(msg, "DATABASE_URL") {
			t.Errorf("stderr %q does not name DATABASE_URL", msg)
		}
	})
	if msg := refused(t, dsn, "endpoint", "vend", "--human", "nobody", "--agent", "x", "--queues", "q"); !strings.Contains(msg, "unknown human") {
		t.Errorf("unknown human: stderr %q", msg)
	}
	if after := rowCounts(t, conn); after != before {
		t.Fatalf("wrote: %s -> %s", before, after)
	}
}

// TestJSONAnywhere: --json may stand anywhere after the command words; without it the output is
// human-readable, not JSON.
func TestJSONAnywhere(t *testing.T) {
	dsn := testdb.New(t)
	ok[obj](t, dsn, "human", "add", "--json", "alice")
	ok[obj](t, dsn, "human", "add", "bob", "--json")
	ok[obj](t, dsn, "human", "add", "-json", "carol")
	e := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--json", "--agent", "w", "--queues", "q")
	ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "q", "--lease-ttl", "30", "--json")
	ok[[]obj](t, dsn, "endpoint", "list", "--json", "--human", "alice")
	ok[[]obj](t, dsn, "endpoint", "list", "--human", "alice", "--json")
	ok[obj](t, dsn, "todo", "push", "--endpoint", e["slug"].(string), "--json", "--queue", "q", "--title", "t")
	f := ok[obj](t, dsn, "friend", "request", "--from", "alice", "--json", "--to", "bob")
	ok[obj](t, dsn, "friend", "approve", "--json", f["id"].(string))
	ok[[]obj](t, dsn, "friend", "list", "--json")
	ok[obj](t, dsn, "settings", "set", "--json", "max_attempts", "4")
	ok[obj](t, dsn, "settings", "set", "max_attempts", "4", "--json")
	ok[obj](t, dsn, "reap", "--json")
	ok[obj](t, dsn, "endpoint", "revoke", "--json", e["slug"].(string))

	for _, args := range [][]string{
		{"human", "add", "dave"},
		{"endpoint", "list"},
		{"friend", "list"},
		{"settings"},
		{"reap"},
		{"migrate"},
	} {
		r := sb(t, dsn, args...)
		if r.code != 0 || r.stdout == "" || json.Valid([]byte(r.stdout)) {
			t.Errorf("switchboard %s without --json: exit %d, stdout %q", strings.Join(args, " "), r.code, r.stdout)
		}
	}
}

func TestDemo(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	d1 := ok[obj](t, dsn, "demo", "--json")
	d2 := ok[obj](t, dsn, "demo", "--json")
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.humans WHERE name = 'demo'`); n != 1 {
		t.Fatalf("%d demo humans", n)
	}
	// The second run reuses the endpoint (and its webhook): no credential, a rotate hint.
	if d2["endpoint_id"] != d1["endpoint_id"] || d2["credential"] != "" || d2["reused"] != true || d1["reused"] != false ||
		d2["ingest_url"] != d1["ingest_url"] || d2["webhook_id"] != d1["webhook_id"] {
		t.Fatalf("second demo = %v, want the first one's endpoint reused", d2)
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.endpoints`); n != 1 {
		t.Fatalf("%d endpoints after two demos, want 1", n)
	}
	// Each run prints a fresh one-time console link for the demo human.
	if a, b := d1["console_invite"], d2["console_invite"]; a == b || !strings.Contains(a.(string), "/console/invite/") {
		t.Fatalf("console invites %v, %v", a, b)
	}
	slug := d1["slug"].(string)
	cred := d1["credential"].(string)
	if d1["mcp_url"] != baseURL+"/mcp/"+slug || !credentialRE.MatchString(cred) {
		t.Fatalf("demo = %v", d1)
	}
	server := d1["mcp_config"].(obj)["mcpServers"].(obj)["switchboard"].(obj)
	if server["type"] != "http" || server["url"] != d1["mcp_url"] || server["headers"].(obj)["Authorization"] != "Bearer "+cred {
		t.Fatalf("mcp_config = %v", d1["mcp_config"])
	}
	if !strings.Contains(d1["push_command"].(string), "todo push --endpoint "+slug+" --queue inbox") {
		t.Errorf("push_command %v", d1["push_command"])
	}
	sum := sha256.Sum256([]byte(cred))
	var queues, verbs, sources, whQueues []string
	var max int
	if err := conn.QueryRow(t.Context(), `
		SELECT e.queues, e.verbs, e.webhook_max, e.webhook_sources, e.webhook_queues
		  FROM switchboard.endpoint_resolve($1) r JOIN switchboard.endpoints e ON e.id = r.endpoint_id
		  JOIN switchboard.agents a ON a.id = e.agent_id WHERE a.name = 'demo-agent'`, sum[:]).
		Scan(&queues, &verbs, &max, &sources, &whQueues); err != nil {
		t.Fatal(err)
	}
	all := scalar[int](t, conn, `SELECT count(*) FROM switchboard.verbs`)
	if !slices.Equal(queues, []string{"inbox"}) || len(verbs) != all || max != 5 ||
		!slices.Equal(sources, []string{"generic", "github"}) || !slices.Equal(whQueues, []string{"inbox"}) {
		t.Fatalf("demo endpoint: %v %v %d %v %v", queues, verbs, max, sources, whQueues)
	}

	// Human-readable, reused: URL, the client config, and how to get a credential again.
	r := sb(t, dsn, "demo")
	if r.code != 0 || !strings.Contains(r.stdout, baseURL+"/mcp/demo-agent-") || !strings.Contains(r.stdout, `"mcpServers"`) ||
		!strings.Contains(r.stdout, "switchboard endpoint rotate "+slug) || !strings.Contains(r.stdout, "switchboard todo push") {
		t.Fatalf("demo output: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestServeHealthzAndShutdown: serve answers /healthz and exits cleanly on SIGTERM.
func TestServeHealthzAndShutdown(t *testing.T) {
	dsn := testdb.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(env(dsn), "SWITCHBOARD_ADDR="+addr, "SWITCHBOARD_REAPER_INTERVAL=0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	var resp *http.Response
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err = http.Get("http://" + addr + "/healthz"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("healthz: %d %v", resp.StatusCode, resp.Header)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("serve exited with %v after SIGTERM", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop after SIGTERM")
	}
}
