package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

var mcpHeaders = map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

// The two 401s (RFC 6750 §3.1): no bearer credential at all, or one that does not resolve.
const (
	missingCred = `Bearer realm="switchboard", error="invalid_request", error_description="missing bearer credential: send Authorization: Bearer sbk_... with the credential vended for this endpoint"`
	badCred     = `Bearer realm="switchboard", error="invalid_token", error_description="unknown or revoked bearer credential: send Authorization: Bearer sbk_... with the credential vended for this endpoint"`
)

var resourceMetadataParam = regexp.MustCompile(` resource_metadata="([^"]*)",`)

// wantUnauthenticated checks a 401 for an unknown or revoked credential.
func wantUnauthenticated(t *testing.T, resp *http.Response) { t.Helper(); want401(t, resp, badCred) }

// want401 checks the 401's WWW-Authenticate header and that the JSON body says the same.
func want401(t *testing.T, resp *http.Response, header string) {
	t.Helper()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", resp.StatusCode)
	}
	// resource_metadata (RFC 9728) names the endpoint's protected resource metadata, for OAuth
	// clients; the rest is compared as is.
	got := resp.Header.Get("WWW-Authenticate")
	meta := resourceMetadataParam.FindStringSubmatch(got)
	if meta == nil || !strings.Contains(meta[1], "/.well-known/oauth-protected-resource/mcp/") {
		t.Fatalf("WWW-Authenticate %q has no resource_metadata", got)
	}
	if got = strings.Replace(got, meta[0], "", 1); got != header {
		t.Fatalf("WWW-Authenticate %q, want %q", got, header)
	}
	var body struct {
		Error struct{ Code, Message string }
	}
	raw, _ := io.ReadAll(resp.Body)
	_, desc, _ := strings.Cut(header, `error_description="`)
	if err := json.Unmarshal(raw, &body); err != nil || body.Error.Code != "unauthenticated" ||
		body.Error.Message != strings.TrimSuffix(desc, `"`) {
		t.Fatalf("body %s", raw)
	}
}

func TestAuthMissingUnknownRevoked(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	url := e.url(ep)

	// Missing credential: 401, and nothing was read or changed (no session).
	want401(t, rawRequest(t, "POST", url, "", []byte(initBody), mcpHeaders), missingCred)
	// A cookie is never a credential.
	hdr := map[string]string{"Cookie": "Authorization=Bearer " + ep.Cred + "; token=" + ep.Cred}
	for k, v := range mcpHeaders {
		hdr[k] = v
	}
	want401(t, rawRequest(t, "POST", url, "", []byte(initBody), hdr), missingCred)
	// Not a bearer scheme.
	want401(t, rawRequest(t, "POST", url, "", []byte(initBody), map[string]string{
		"Authorization": "Basic " + ep.Cred, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}), missingCred)
	// Unknown credential.
	wantUnauthenticated(t, rawRequest(t, "POST", url, "sbk_unknown", []byte(initBody), mcpHeaders))
	if n := e.srv.MCP().SessionCount(ep.ID); n != 0 {
		t.Fatalf("%d sessions after refused requests", n)
	}

	// The valid credential works; after revocation it is refused at once.
	resp := rawRequest(t, "POST", url, ep.Cred, []byte(initBody), mcpHeaders)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %d", resp.StatusCode)
	}
	e.exec(`SELECT switchboard.endpoint_revoke($1)`, ep.ID)
	wantUnauthenticated(t, rawRequest(t, "POST", url, ep.Cred, []byte(initBody), mcpHeaders))
	wantUnauthenticated(t, rawRequest(t, "GET", url, ep.Cred, nil, map[string]string{"Accept": "text/event-stream"}))
}

func TestAuthOtherEndpointPathAndSession(t *testing.T) {
	e := newEnv(t)
	a := e.vend("ann", []string{"inbox"}, nil)
	b := e.vend("bob", []string{"inbox"}, nil)

	// A valid credential on another endpoint's path: 403.
	resp := rawRequest(t, "POST", e.url(b), a.Cred, []byte(initBody), mcpHeaders)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("other path: %d", resp.StatusCode)
	}

	// A session belongs to the endpoint that created it: B cannot use A's session id.
	ca := e.connect(t, a, nil)
	sid := ca.Session.ID()
	if sid == "" {
		t.Fatal("no session id")
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	hdr := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}
	for k, v := range mcpHeaders {
		hdr[k] = v
	}
	// The SDK binds a session to the endpoint it was made for (TokenInfo.UserID): 403.
	if resp := rawRequest(t, "POST", e.url(b), b.Cred, []byte(list), hdr); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("other endpoint's session: %d", resp.StatusCode)
	}
	if resp := rawRequest(t, "POST", e.url(a), a.Cred, []byte(list), hdr); resp.StatusCode != http.StatusOK {
		t.Fatalf("own session: %d", resp.StatusCode)
	}
}

func TestRevocationClosesLiveSessions(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c1 := e.connect(t, ep, nil)
	c2 := e.connect(t, ep, nil)
	if n := e.srv.MCP().SessionCount(ep.ID); n != 2 {
		t.Fatalf("%d sessions", n)
	}
	e.exec(`SELECT switchboard.endpoint_revoke($1)`, ep.ID)
	eventually(t, 5*time.Second, "sessions closed", func() bool { return e.srv.MCP().SessionCount(ep.ID) == 0 })
	for _, c := range []interface{ Wait() error }{c1.Session, c2.Session} {
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("client session still open after revocation")
		}
	}
	if _, err := c1.Call(ctxT(t), "list_todos", nil); err == nil || !strings.Contains(strings.ToLower(err.Error()), "clos") {
		t.Fatalf("call after revocation: %v", err)
	}
}

// After the database vouched for a session's credential, requests on that session are
// authenticated without it, until a revocation is heard (made any way, even by a DBA's UPDATE)
// or the revocation feed reconnects (it may have missed one): then the database is asked again.
func TestSessionCredentialVouched(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, &agentclientOptionsNoStream)
	viaDB := func() float64 { return metricValue(t, e.base, `switchboard_mcp_authentications_total{via="database"}`) }
	viaSession := func() float64 { return metricValue(t, e.base, `switchboard_mcp_authentications_total{via="session"}`) }

	db, sess := viaDB(), viaSession()
	for i := 0; i < 10; i++ {
		if _, err := c.Call(ctxT(t), "list_todos", nil); err != nil {
			t.Fatal(err)
		}
	}
	if d, s := viaDB()-db, viaSession()-sess; d != 0 || s != 10 {
		t.Fatalf("10 calls on a vouched session: %v database lookups, %v session; want 0 and 10", d, s)
	}

	// The feed breaks and comes back: the next request is checked by the database again.
	var feed int
	if err := e.pool.QueryRow(ctxT(t), `SELECT pid FROM pg_stat_activity WHERE application_name = 'switchboard-doorbell'
		AND datname = current_database()`).Scan(&feed); err != nil {
		t.Fatal(err)
	}
	e.exec(`SELECT pg_terminate_backend($1)`, feed)
	eventually(t, 10*time.Second, "doorbell reconnected", func() bool {
		var n int
		_ = e.pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'switchboard-doorbell'
			AND datname = current_database() AND pid <> $1`, feed).Scan(&n)
		return n == 1
	})
	<-e.srv.Doorbell().Listening()
	db = viaDB()
	for i := 0; i < 3; i++ {
		if _, err := c.Call(ctxT(t), "list_todos", nil); err != nil {
			t.Fatal(err)
		}
	}
	if d := viaDB() - db; d != 1 {
		t.Fatalf("3 calls after the feed reconnected: %v database lookups, want 1", d)
	}

	// A DBA revokes by hand: the trigger notifies, the session closes, the credential gets 401.
	sid := c.Session.ID()
	e.exec(`UPDATE switchboard.endpoints SET state = 'revoked', revoked_at = now() WHERE id = $1`, ep.ID)
	eventually(t, 5*time.Second, "sessions closed", func() bool { return e.srv.MCP().SessionCount(ep.ID) == 0 })
	hdr := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}
	for k, v := range mcpHeaders {
		hdr[k] = v
	}
	list := `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`
	wantUnauthenticated(t, rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(list), hdr))
}
