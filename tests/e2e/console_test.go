package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"switchboard/server"
	"switchboard/server/store"
)

// The human console (server/console). The browser test drives passkeys through Chromium's
// virtual authenticator; the security tests here sign in by writing a session row with the
// same SQL function the server uses after a passkey ceremony (console_session_start), then
// speak HTTP like a browser would (cookies by hand: Go's cookie jar never sends a Secure cookie
// over plain http, while browsers do to http://localhost).

// consoleEnv is an env whose public URL names localhost (a passkey's relying party is a host
// name): the port is chosen first, so the base URL can carry it.
func consoleEnv(t *testing.T) (*env, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	base := "http://localhost:" + itoa(port)
	e := newEnv(t, func(c *server.Config) {
		c.Addr = "127.0.0.1:" + itoa(port)
		c.BaseURL = base
		c.OAuth.AllowPrivateClients = true
	})
	return e, base
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// addHuman adds a human and returns its id.
func (e *env) addHuman(name string, operator bool) string {
	e.t.Helper()
	var id string
	if err := e.pool.QueryRow(context.Background(),
		`INSERT INTO switchboard.humans (name, operator) VALUES ($1, $2) RETURNING id`, name, operator).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// invite mints a one-time sign-in link as `switchboard human invite` does; it returns the token.
func (e *env) invite(human string, ttl time.Duration) string {
	e.t.Helper()
	tok := randomToken()
	e.exec(`SELECT switchboard.console_invite_create($1, $2, $3)`, human, store.CredentialHash(tok), ttl)
	return tok
}

// signIn starts a console session for the human, as a passkey sign-in ends, and returns the
// cookie's value.
func (e *env) signIn(humanID string) string {
	e.t.Helper()
	tok := randomToken()
	e.exec(`SELECT switchboard.console_session_start($1, $2, interval '1 hour', interval '12 hours')`,
		humanID, store.CredentialHash(tok))
	return tok
}

// page is one console request as a browser of the same origin sends it: the session cookie, and
// for a POST the form and Sec-Fetch-Site: same-origin. Redirects are not followed.
func page(t *testing.T, method, u, session string, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if method == http.MethodPost {
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	if session != "" {
		req.AddCookie(&http.Cookie{Name: "__Host-sb_session", Value: session})
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestConsoleBrowser runs tests/ts/console.test.mjs: alice and bob register passkeys from
// their invites in Chromium's virtual authenticator and sign in with them alone; alice vends an
// endpoint with the keyboard and its credential drains a todo through the TypeScript SDK; bob
// asks alice for friendship, she approves, and a route from bob's webhook into alice's endpoint
// then works; alice approves the SDK's OAuth connection without a code. Screenshots of every
// screen go to SWITCHBOARD_CONSOLE_SCREENSHOTS (default tests/ts/screenshots, git-ignored).
func TestConsoleBrowser(t *testing.T) {
	logs := captureLogs(t)
	e, base := consoleEnv(t)
	e.addHuman("operator", true)
	e.addHuman("alice", false)
	e.addHuman("bob", false)
	aliceInvite, aliceInvite2, bobInvite := e.invite("alice", time.Hour), e.invite("alice", time.Hour), e.invite("bob", time.Hour)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		err := e.pool.QueryRow(r.Context(), `SELECT todo_id FROM switchboard.create_todo($1, $2, $3)`,
			r.FormValue("endpoint"), r.FormValue("queue"), r.FormValue("title")).Scan(&id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"todo_id": id})
	}))
	t.Cleanup(hook.Close)
	runConsoleBrowser(t, "console.test.mjs",
		"SB_BASE="+base, "SB_INVITE_ALICE="+base+"/console/invite/"+aliceInvite,
		"SB_INVITE_BOB="+base+"/console/invite/"+bobInvite, "SB_INVITE_ALICE2="+base+"/console/invite/"+aliceInvite2, "SB_PUSH_URL="+hook.URL)

	// The friendship bob asked for and alice approved lets bob's webhooks deliver into alice's
	// endpoints (the browser test revoked the one she vended there): a route from bob's webhook
	// to another endpoint of alice's is accepted.
	aliceEndpoint := e.vend("alice", []string{"inbox"}, nil).ID
	bobEP := e.vend("bob", []string{"inbox"}, nil)
	e.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{generic}', webhook_queues = '{inbox}' WHERE id = $1`, bobEP.ID)
	var hookDoc []byte
	if err := e.pool.QueryRow(context.Background(), `SELECT switchboard.webhook_create($1, 'generic', 'inbox', $2, NULL)`,
		bobEP.ID, randomToken()).Scan(&hookDoc); err != nil {
		t.Fatal(err)
	}
	var wh struct {
		ID string `json:"webhook_id"`
	}
	_ = json.Unmarshal(hookDoc, &wh)
	var routed []byte
	if err := e.pool.QueryRow(context.Background(), `SELECT switchboard.route_add($1, $2, $3)`,
		bobEP.ID, wh.ID, aliceEndpoint).Scan(&routed); err != nil {
		t.Fatalf("route from bob's webhook to alice's endpoint after the approved friendship: %v", err)
	}

	// No invite token or credential in the server's logs.
	for _, secret := range []string{aliceInvite, aliceInvite2, bobInvite} {
		if strings.Contains(logs.String(), secret) {
			t.Error("an invite token is in the server log")
		}
	}
	if regexp.MustCompile(`sbk_[A-Za-z0-9_-]{20,}`).MatchString(logs.String()) {
		t.Error("a credential is in the server log")
	}
}

// Bob asks for alice's endpoint, grant, friend edge and passkey: each is the not-found page,
// byte for byte the same as for an unknown id and a malformed one.
func TestConsoleOtherHumansIdsAreNotFound(t *testing.T) {
	e, base := consoleEnv(t)
	e.addHuman("alice", false)
	bobID := e.addHuman("bob", false)
	e.addHuman("carol", false)
	ep := e.vend("alice", []string{"inbox"}, nil)
	var grant, edge, passkey string
	ctx := context.Background()
	if err := e.pool.QueryRow(ctx, `INSERT INTO switchboard.oauth_grants (endpoint_id, client_hash, client_name, redirect_host)
		VALUES ($1, $2, 'c', 'h') RETURNING id`, ep.ID, store.CredentialHash("client")).Scan(&grant); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `SELECT switchboard.friend_request('carol', 'alice')->>'id'`).Scan(&edge); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `INSERT INTO switchboard.console_passkeys (human_id, credential_id, credential)
		SELECT id, '\x01', '{}' FROM switchboard.humans WHERE name = 'alice' RETURNING id`).Scan(&passkey); err != nil {
		t.Fatal(err)
	}
	bob := e.signIn(bobID)
	unknown := "7d0c5a8e-3f51-4c1e-9a0b-2b9f6f0e1d42"
	for _, c := range []struct{ method, path string }{
		{"GET", "/console/endpoints/%s"},
		{"GET", "/console/endpoints/%s/rotate"},
		{"GET", "/console/endpoints/%s/revoke"},
		{"POST", "/console/endpoints/%s/revoke"},
		{"POST", "/console/endpoints/%s/rotate"},
		{"POST", "/console/grants/%s/revoke"},
		{"POST", "/console/friends/%s/approve"},
		{"POST", "/console/passkeys/%s/remove"},
	} {
		theirs := map[string]string{"/console/grants/%s/revoke": grant, "/console/friends/%s/approve": edge,
			"/console/passkeys/%s/remove": passkey}[c.path]
		if theirs == "" {
			theirs = ep.ID
		}
		var bodies []string
		for _, id := range []string{theirs, unknown, "not-a-uuid", "'; select 1 --"} {
			resp, body := page(t, c.method, base+strings.Replace(c.path, "%s", url.PathEscape(id), 1), bob, url.Values{}, nil)
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s %s as bob (id %q): status %d, want 404", c.method, c.path, id, resp.StatusCode)
			}
			bodies = append(bodies, body)
		}
		for i := 1; i < len(bodies); i++ {
			if bodies[i] != bodies[0] {
				t.Errorf("%s %s: the not-found page for another human's id differs from case %d:\n%s\n---\n%s", c.method, c.path, i, bodies[0], bodies[i])
			}
		}
	}
	// Nothing changed.
	var state, fstate string
	var revoked *time.Time
	_ = e.pool.QueryRow(ctx, `SELECT state FROM switchboard.endpoints WHERE id = $1`, ep.ID).Scan(&state)
	_ = e.pool.QueryRow(ctx, `SELECT revoked_at FROM switchboard.oauth_grants WHERE id = $1`, grant).Scan(&revoked)
	_ = e.pool.QueryRow(ctx, `SELECT state FROM switchboard.friend_edges WHERE id = $1`, edge).Scan(&fstate)
	if state != "active" || revoked != nil || fstate != "pending" {
		t.Errorf("bob changed alice's rows: endpoint %s, grant revoked %v, edge %s", state, revoked, fstate)
	}
	// Alice's endpoint is not on bob's home page; an operator sees it.
	if _, body := page(t, "GET", base+"/console/", bob, nil, nil); strings.Contains(body, ep.Slug) {
		t.Error("bob's home lists alice's endpoint")
	}
	op := e.signIn(e.addHuman("op", true))
	if resp, body := page(t, "GET", base+"/console/endpoints/"+ep.ID, op, nil, nil); resp.StatusCode != 200 || !strings.Contains(body, ep.Slug) {
		t.Errorf("the operator cannot see alice's endpoint: %d", resp.StatusCode)
	}
}

// A state-changing request from another origin is refused, with or without a session, and
// writes nothing; the same request from the console's own origin works.
func TestConsoleCrossOriginRefused(t *testing.T) {
	e, base := consoleEnv(t)
	alice := e.signIn(e.addHuman("alice", false))
	form := url.Values{"agent": {"a1"}, "queues": {"inbox"}, "verbs": {"claim_next", "complete"}}
	for _, hdr := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"},
		{"Sec-Fetch-Site": "", "Origin": "http://evil.example"},
	} {
		resp, _ := page(t, "POST", base+"/console/vend", alice, form, hdr)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("cross-origin POST %v: status %d, want 403", hdr, resp.StatusCode)
		}
	}
	resp, _ := page(t, "POST", base+"/console/signout", alice, url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin sign-out: status %d", resp.StatusCode)
	}
	var n int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM switchboard.endpoints`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d endpoints written by refused requests", n)
	}
	resp, body := page(t, "POST", base+"/console/vend", alice, form, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="credential"`) {
		t.Fatalf("same-origin vend: %d\n%s", resp.StatusCode, body)
	}
	// A same-origin GET still reads (a cross-site link may open a page; it changes nothing).
	if resp, _ := page(t, "GET", base+"/console/", alice, nil, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != 200 {
		t.Errorf("cross-site GET of home: %d", resp.StatusCode)
	}
}

// Bad input on the vend form: an inline message on the form, nothing written.
func TestConsoleVendBadInput(t *testing.T) {
	e, base := consoleEnv(t)
	alice := e.signIn(e.addHuman("alice", false))
	for _, c := range []struct {
		form url.Values
		msg  string
	}{
		{url.Values{"agent": {"a"}, "queues": {"bad queue!"}, "verbs": {"claim"}}, "queue names"},
		{url.Values{"agent": {""}, "queues": {"inbox"}, "verbs": {"claim"}}, "agent name"},
		{url.Values{"agent": {"a"}, "queues": {"inbox"}}, "at least one verb"},
		{url.Values{"agent": {"a"}, "queues": {"inbox"}, "verbs": {"nope"}}, "unknown verb"},
		{url.Values{"agent": {"a"}, "queues": {"inbox"}, "verbs": {"claim"}, "lease_ttl": {"0"}}, "Lease TTL"},
		{url.Values{"agent": {"a"}, "queues": {"inbox"}, "verbs": {"claim"}, "webhook_max": {"-1"}}, "Webhook ceiling"},
	} {
		resp, body := page(t, "POST", base+"/console/vend", alice, c.form, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `role="alert"`) || !strings.Contains(strings.ToLower(body), strings.ToLower(c.msg)) {
			t.Errorf("vend %v: status %d, want 400 with %q inline:\n%s", c.form, resp.StatusCode, c.msg, body)
		}
		if strings.Contains(body, "sbk_") {
			t.Errorf("vend %v: a credential on a refused form", c.form)
		}
	}
	var n int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM switchboard.endpoints`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d endpoints written by bad input", n)
	}
}

// The cookies the console sets: __Host- prefixed, Secure, HttpOnly, SameSite=Lax, Path=/ (the
// session cookie's own flags are checked in the browser test, where a passkey sets it).
func TestConsoleCookieFlags(t *testing.T) {
	e, base := consoleEnv(t)
	alice := e.signIn(e.addHuman("alice", false))
	resp, _ := page(t, "POST", base+"/console/signin/begin", "", url.Values{}, nil)
	resp2, _ := page(t, "POST", base+"/console/signout", alice, url.Values{}, nil)
	for _, r := range []*http.Response{resp, resp2} {
		cs := r.Cookies()
		if len(cs) == 0 {
			t.Fatalf("%s: no cookie set", r.Request.URL.Path)
		}
		for _, c := range cs {
			if !strings.HasPrefix(c.Name, "__Host-") || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode ||
				c.Path != "/" || c.Domain != "" {
				t.Errorf("%s: cookie %s: Secure %v HttpOnly %v SameSite %v Path %q Domain %q", r.Request.URL.Path,
					c.Name, c.Secure, c.HttpOnly, c.SameSite, c.Path, c.Domain)
			}
		}
	}
	if csp := resp2.Header.Get("Content-Security-Policy"); csp == "" {
		t.Error("no CSP")
	}
	r, _ := page(t, "GET", base+"/console/signin", "", nil, nil)
	// Strict: same-origin scripts, styles and forms only, no inline source of any kind.
	const strict = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	if csp := r.Header.Get("Content-Security-Policy"); csp != strict {
		t.Errorf("console CSP: %q, want %q", csp, strict)
	}
}

// A used invite and an expired one are refused: the page says so, and a passkey ceremony
// cannot start.
func TestConsoleInviteUsedOrExpired(t *testing.T) {
	e, base := consoleEnv(t)
	e.addHuman("alice", false)
	live, used, expired := e.invite("alice", time.Hour), e.invite("alice", time.Hour), e.invite("alice", time.Hour)
	e.exec(`UPDATE switchboard.console_invites SET used_at = now() WHERE token_hash = $1`, store.CredentialHash(used))
	e.exec(`UPDATE switchboard.console_invites SET expires_at = now() - interval '1 second' WHERE token_hash = $1`, store.CredentialHash(expired))
	if resp, body := page(t, "GET", base+"/console/invite/"+live, "", nil, nil); resp.StatusCode != 200 || !strings.Contains(body, "passkey-register") {
		t.Fatalf("live invite: %d", resp.StatusCode)
	}
	if resp, _ := page(t, "POST", base+"/console/invite/"+live+"/begin", "", url.Values{}, nil); resp.StatusCode != 200 {
		t.Fatalf("live invite's ceremony: %d", resp.StatusCode)
	}
	for name, tok := range map[string]string{"used": used, "expired": expired, "unknown": randomToken()} {
		resp, body := page(t, "GET", base+"/console/invite/"+tok, "", nil, nil)
		if resp.StatusCode != http.StatusNotFound || strings.Contains(body, "passkey-register") {
			t.Errorf("%s invite page: %d", name, resp.StatusCode)
		}
		if resp, _ := page(t, "POST", base+"/console/invite/"+tok+"/begin", "", url.Values{}, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s invite's ceremony: %d, want 404", name, resp.StatusCode)
		}
	}
}

// After sign-out the old cookie opens nothing; an expired session neither.
func TestConsoleSignOut(t *testing.T) {
	e, base := consoleEnv(t)
	aliceID := e.addHuman("alice", false)
	alice := e.signIn(aliceID)
	if resp, body := page(t, "GET", base+"/console/", alice, nil, nil); resp.StatusCode != 200 || !strings.Contains(body, "alice") {
		t.Fatalf("signed in: %d", resp.StatusCode)
	}
	if resp, _ := page(t, "POST", base+"/console/signout", alice, url.Values{}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	if resp, _ := page(t, "GET", base+"/console/", alice, nil, nil); resp.StatusCode != http.StatusSeeOther ||
		resp.Header.Get("Location") != "/console/signin" {
		t.Errorf("old cookie after sign-out: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := page(t, "POST", base+"/console/vend", alice, url.Values{"agent": {"a"}, "queues": {"q"}, "verbs": {"claim"}}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("old cookie POST after sign-out: %d", resp.StatusCode)
	}
	// Idle and absolute expiry.
	idle, old := e.signIn(aliceID), e.signIn(aliceID)
	e.exec(`UPDATE switchboard.console_sessions SET last_seen_at = now() - interval '2 hours' WHERE id_hash = $1`, store.CredentialHash(idle))
	e.exec(`UPDATE switchboard.console_sessions SET expires_at = now() - interval '1 second' WHERE id_hash = $1`, store.CredentialHash(old))
	for name, s := range map[string]string{"idle": idle, "expired": old} {
		if resp, _ := page(t, "GET", base+"/console/", s, nil, nil); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s session: %d", name, resp.StatusCode)
		}
	}
}

// Failed sign-ins are rate-limited per client: after the allowance, 429 before any check.
func TestConsoleSignInRateLimited(t *testing.T) {
	_, base := consoleEnv(t)
	var statuses []int
	for range 8 {
		resp, _ := page(t, "POST", base+"/console/signin/finish", "", url.Values{"x": {"not a passkey answer"}}, nil)
		statuses = append(statuses, resp.StatusCode)
	}
	if statuses[0] != http.StatusUnauthorized {
		t.Errorf("first failed sign-in: %d, want 401", statuses[0])
	}
	if last := statuses[len(statuses)-1]; last != http.StatusTooManyRequests {
		t.Errorf("statuses %v: want 429 after the allowance", statuses)
	}
	if resp, _ := page(t, "POST", base+"/console/signin/begin", "", url.Values{}, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a new sign-in while limited: %d, want 429", resp.StatusCode)
	}
}

// No session id, invite token or credential in any log line, and a credential is on no page but
// its one reveal.
func TestConsoleNoSecretsInLogs(t *testing.T) {
	logs := captureLogs(t)
	e, base := consoleEnv(t)
	aliceID := e.addHuman("alice", false)
	alice := e.signIn(aliceID)
	inv := e.invite("alice", time.Hour)
	page(t, "GET", base+"/console/invite/"+inv, "", nil, nil)
	page(t, "POST", base+"/console/invite/"+inv+"/begin", "", url.Values{}, nil)
	page(t, "POST", base+"/console/invite/"+inv+"/finish", "", url.Values{}, nil)
	_, body := page(t, "POST", base+"/console/vend", alice, url.Values{"agent": {"a"}, "queues": {"inbox"}, "verbs": {"claim"}}, nil)
	cred := regexp.MustCompile(`sbk_[A-Za-z0-9_-]+`).FindString(body)
	if cred == "" {
		t.Fatalf("no credential on the vend result:\n%s", body)
	}
	var id string
	_ = e.pool.QueryRow(context.Background(), `SELECT id FROM switchboard.endpoints`).Scan(&id)
	for _, p := range []string{"/console/", "/console/endpoints/" + id, "/console/audit"} {
		if _, b := page(t, "GET", base+p, alice, nil, nil); strings.Contains(b, cred) || strings.Contains(b, alice) {
			t.Errorf("%s shows the credential or the session id", p)
		}
	}
	page(t, "POST", base+"/console/signout", alice, url.Values{}, nil)
	for name, s := range map[string]string{"session id": alice, "invite token": inv, "credential": cred} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the %s is in the server log", name)
		}
	}
	if !strings.Contains(logs.String(), "/console/") {
		t.Log("note: no console route in the log")
	}
}

// Home counts each queue's live todos by state; the done history is not counted (nor scanned:
// each state is read through its partial index, db/code/console.sql).
func TestConsoleHomeCounts(t *testing.T) {
	e, base := consoleEnv(t)
	alice := e.signIn(e.addHuman("alice", false))
	ep := e.vend("alice", []string{"inbox"}, nil)
	e.push(ep, "inbox", "waiting")
	dead, done := e.push(ep, "inbox", "dead"), e.push(ep, "inbox", "done")
	e.exec(`UPDATE switchboard.todos SET state = 'failed', completed_at = now(), result = '{}' WHERE id = $1`, dead)
	e.exec(`UPDATE switchboard.todos SET state = 'done', completed_at = now() WHERE id = $1`, done)
	_, body := page(t, "GET", base+"/console/", alice, nil, nil)
	row := "<td>" + ep.Slug + "</td><td>inbox</td><td>1</td><td>0</td><td>0</td><td>1</td>"
	if !strings.Contains(body, row) {
		t.Fatalf("home has no row %s:\n%s", row, body)
	}
}

// runConsoleBrowser runs one of tests/ts's console scripts in Chromium with env, keeping its
// screenshots in SWITCHBOARD_CONSOLE_SCREENSHOTS (default tests/ts/screenshots). The bound is
// generous: on a loaded 2-core machine a script ran past 240 s.
func runConsoleBrowser(t *testing.T, script string, env ...string) {
	t.Helper()
	shots := os.Getenv("SWITCHBOARD_CONSOLE_SCREENSHOTS")
	if shots == "" {
		abs, err := filepath.Abs(filepath.Join(tsDir, "screenshots"))
		if err != nil {
			t.Fatal(err)
		}
		shots = abs
	}
	env = append(env, "SB_CHROMIUM="+chromiumBin(t), "SB_SHOTS="+shots)
	runNode(t, 600*time.Second, env, "--test", "--test-reporter=spec", "--test-concurrency=1", script)
	t.Logf("console screenshots: %s", shots)
}
