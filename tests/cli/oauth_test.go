package cli_test

import (
	"crypto/sha256"
	"regexp"
	"strings"
	"testing"
	"time"

	"switchboard/tests/testdb"
)

// endpoint connect mints a one-time approval code for the consent page (stored as its sha256
// only) and prints the MCP URL to paste; grants lists what was approved; revoke-grant ends one.
func TestEndpointConnectGrantsRevokeGrant(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	e := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "q", "--json")
	id, slug := e["endpoint_id"].(string), e["slug"].(string)

	r := ok[obj](t, dsn, "endpoint", "connect", slug, "--ttl", "15m", "--json")
	if len(r) != 4 || r["endpoint_id"] != id || !strings.HasSuffix(r["mcp_url"].(string), "/mcp/"+slug) {
		t.Fatalf("connect = %v", r)
	}
	code := r["approval_code"].(string)
	if !regexp.MustCompile(`^[A-Z2-9]{4}(-[A-Z2-9]{4}){3}$`).MatchString(code) {
		t.Fatalf("approval code %q", code)
	}
	exp, err := time.Parse(time.RFC3339Nano, r["expires_at"].(string))
	if err != nil || time.Until(exp) < 14*time.Minute || time.Until(exp) > 16*time.Minute {
		t.Fatalf("expires_at %v (%v)", r["expires_at"], err)
	}
	sum := sha256.Sum256([]byte(code))
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.oauth_approval_codes WHERE code_hash = $1 AND endpoint_id = $2`, sum[:], id); n != 1 {
		t.Fatalf("%d stored codes with the hash", n)
	}
	// Human-readable: the URL and the code.
	if out := sb(t, dsn, "endpoint", "connect", id); out.code != 0 || !strings.Contains(out.stdout, "/mcp/"+slug) ||
		!strings.Contains(out.stdout, "approval_code") {
		t.Fatalf("connect text: %+v", out)
	}

	if list := ok[[]any](t, dsn, "endpoint", "grants", slug, "--json"); len(list) != 0 {
		t.Fatalf("grants before consent: %v", list)
	}
	// The consent page records a grant (as the server does).
	exec1(t, conn, `SELECT switchboard.oauth_approve($1, $2, $3, 'Claude', 'claude.ai')`, id, sum[:], make([]byte, 32))
	list := ok[[]any](t, dsn, "endpoint", "grants", id, "--json")
	if len(list) != 1 {
		t.Fatalf("grants %v", list)
	}
	g := list[0].(obj)
	if g["client_name"] != "Claude" || g["redirect_host"] != "claude.ai" || g["revoked_at"] != nil {
		t.Fatalf("grant %v", g)
	}
	rv := ok[obj](t, dsn, "endpoint", "revoke-grant", g["grant_id"].(string), "--json")
	if rv["state"] != "revoked" || rv["endpoint_id"] != id {
		t.Fatalf("revoke-grant %v", rv)
	}
	if g := ok[[]any](t, dsn, "endpoint", "grants", id, "--json")[0].(obj); g["revoked_at"] == nil {
		t.Fatalf("grant after revoke %v", g)
	}

	oauthRows := `SELECT (SELECT count(*) FROM switchboard.oauth_approval_codes) * 1000 +
		(SELECT count(*) FROM switchboard.oauth_grants WHERE revoked_at IS NULL)`
	before := scalar[int](t, conn, oauthRows)
	for _, args := range [][]string{
		{"endpoint", "connect", slug, "--ttl", "10s"},
		{"endpoint", "connect", slug, "--ttl", "48h"},
		{"endpoint", "connect", "no-such-slug"},
		{"endpoint", "connect"},
		{"endpoint", "grants", "no-such-slug"},
		{"endpoint", "revoke-grant", "not-a-uuid"},
		{"endpoint", "revoke-grant", "00000000-0000-0000-0000-000000000000"},
	} {
		refused(t, dsn, args...)
	}
	ok[obj](t, dsn, "endpoint", "revoke", id, "--json")
	refused(t, dsn, "endpoint", "connect", id) // a revoked endpoint takes no new connection
	if after := scalar[int](t, conn, oauthRows); after != before {
		t.Fatalf("refusals wrote: %d -> %d", before, after)
	}
}
