package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"switchboard/server"
	"switchboard/tests/e2e/agentclient"
)

// The OAuth flow of a hosted agent, driven from Go as a script drives the consent page:
// register (DCR) or a client metadata document, /authorize with PKCE and the resource, the page
// answered with an approval code, the code exchanged, the MCP endpoint called with the token.
// tests/ts/oauth.test.mjs runs the same with the official TypeScript SDK and a real browser.

const testRedirect = "http://127.0.0.1/callback" // loopback: any port matches (RFC 8252)

type oauthClient struct {
	t        *testing.T
	base     string
	id       string
	redirect string
	http     *http.Client
}

// newOAuthClient registers with Dynamic Client Registration.
func newOAuthClient(t *testing.T, base string) *oauthClient {
	t.Helper()
	resp := postJSON(t, base+"/register", map[string]any{
		"client_name": "Test Host", "redirect_uris": []string{testRedirect},
		"grant_types": []string{"authorization_code", "refresh_token"}, "token_endpoint_auth_method": "none"})
	var reg struct {
		ClientID string `json:"client_id"`
	}
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&reg) != nil || reg.ClientID == "" {
		t.Fatalf("register: %d", resp.StatusCode)
	}
	return clientFor(t, base, reg.ClientID, testRedirect)
}

func clientFor(t *testing.T, base, id, redirect string) *oauthClient {
	jar, _ := cookiejar.New(nil)
	return &oauthClient{t: t, base: base, id: id, redirect: redirect, http: &http.Client{
		Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func postJSON(t *testing.T, u string, body any) *http.Response {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(u, "application/json", strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// pkce is a verifier and its S256 challenge.
func pkce() (verifier, challenge string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	verifier = base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

// mintApproval stores an approval code for the endpoint, as `switchboard endpoint connect` does.
func (e *env) mintApproval(ep endpoint) string {
	e.t.Helper()
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	code := "TEST-" + base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(code))
	e.exec(`SELECT switchboard.oauth_approval_mint($1, $2, interval '10 minutes')`, ep.ID, sum[:])
	return code
}

// authorizeURL is the client's /authorize request; extra overrides or adds parameters.
func (c *oauthClient) authorizeURL(resource, challenge string, extra url.Values) string {
	q := url.Values{"response_type": {"code"}, "client_id": {c.id}, "redirect_uri": {c.redirect},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}, "resource": {resource},
		"state": {"state-1234567890"}, "scope": {"mcp"}}
	for k, v := range extra {
		q[k] = v
	}
	return c.base + "/authorize?" + q.Encode()
}

var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// page is GET /authorize: the consent page's status, body and form fields.
func (c *oauthClient) page(u string) (int, string, url.Values) {
	c.t.Helper()
	resp, err := c.http.Get(u)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	form := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(string(raw), -1) {
		form.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return resp.StatusCode, resp.Header.Get("Location"), nil
	}
	return resp.StatusCode, string(raw), form
}

// answer posts the consent form; a redirect's Location, or the page again.
func (c *oauthClient) answer(form url.Values, code, decision string) (int, string) {
	c.t.Helper()
	f := url.Values{}
	for k, v := range form {
		f[k] = v
	}
	f.Set("approval_code", code)
	f.Set("decision", decision)
	resp, err := c.http.PostForm(c.base+"/authorize", f)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if loc := resp.Header.Get("Location"); loc != "" {
		return resp.StatusCode, loc
	}
	return resp.StatusCode, string(raw)
}

// consent runs /authorize and approves with code: the authorization code.
func (c *oauthClient) consent(resource, challenge, approval string) string {
	c.t.Helper()
	status, body, form := c.page(c.authorizeURL(resource, challenge, nil))
	if status != http.StatusOK {
		c.t.Fatalf("authorize: %d %s", status, body)
	}
	status, loc := c.answer(form, approval, "approve")
	u, err := url.Parse(loc)
	if status != http.StatusSeeOther && status != http.StatusFound || err != nil || u.Query().Get("code") == "" {
		c.t.Fatalf("approve: %d %s", status, loc)
	}
	if u.Query().Get("state") != "state-1234567890" {
		c.t.Fatalf("state not returned: %s", loc)
	}
	return u.Query().Get("code")
}

type tokenResponse struct {
	Status           int
	AccessToken      string `json:"access_token"`
	RefreshToken     string `json:"refresh_token"`
	ExpiresIn        int    `json:"expires_in"`
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
}

func (c *oauthClient) tokenRequest(f url.Values) tokenResponse {
	c.t.Helper()
	f.Set("client_id", c.id)
	resp, err := c.http.PostForm(c.base+"/token", f)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr tokenResponse
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	tr.Status = resp.StatusCode
	return tr
}

func (c *oauthClient) exchange(code, verifier, resource string) tokenResponse {
	f := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {c.redirect}}
	if verifier != "" {
		f.Set("code_verifier", verifier)
	}
	if resource != "" {
		f.Set("resource", resource)
	}
	return c.tokenRequest(f)
}

func (c *oauthClient) refresh(rt string) tokenResponse {
	return c.tokenRequest(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
}

// tokens runs the whole flow for the endpoint.
func (e *env) tokens(c *oauthClient, ep endpoint) tokenResponse {
	e.t.Helper()
	verifier, challenge := pkce()
	code := c.consent(e.url(ep), challenge, e.mintApproval(ep))
	tr := c.exchange(code, verifier, e.url(ep))
	if tr.Status != http.StatusOK || tr.AccessToken == "" || tr.RefreshToken == "" {
		e.t.Fatalf("token: %+v", tr)
	}
	return tr
}

func wantTokenError(t *testing.T, tr tokenResponse, code string) {
	t.Helper()
	if tr.Status != http.StatusBadRequest && tr.Status != http.StatusUnauthorized || tr.Error != code || tr.AccessToken != "" {
		t.Fatalf("want %s, got %+v", code, tr)
	}
}

// mcpStatus is the HTTP status of an initialize with this bearer.
func (e *env) mcpStatus(ep endpoint, token string) int {
	e.t.Helper()
	return rawRequest(e.t, "POST", e.url(ep), token, []byte(initBody), mcpHeaders).StatusCode
}

func TestOAuthDiscovery(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)

	// The 401 points at the endpoint's protected resource metadata.
	resp := rawRequest(t, "POST", e.url(ep), "", []byte(initBody), mcpHeaders)
	meta := resourceMetadataParam.FindStringSubmatch(resp.Header.Get("WWW-Authenticate"))
	if resp.StatusCode != 401 || meta == nil || meta[1] != e.base+"/.well-known/oauth-protected-resource/mcp/"+ep.Slug {
		t.Fatalf("401 %q", resp.Header.Get("WWW-Authenticate"))
	}
	var prm map[string]any
	resp = rawRequest(t, "GET", meta[1], "", nil, nil)
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&prm) != nil || prm["resource"] != e.url(ep) ||
		jsonText(prm["authorization_servers"]) != `["`+e.base+`"]` || jsonText(prm["bearer_methods_supported"]) != `["header"]` ||
		jsonText(prm["scopes_supported"]) != `["mcp"]` {
		t.Fatalf("resource metadata %d %v", resp.StatusCode, prm)
	}
	if r := rawRequest(t, "GET", e.base+"/.well-known/oauth-protected-resource/mcp/nope", "", nil, nil); r.StatusCode != 404 {
		t.Fatalf("unknown endpoint metadata: %d", r.StatusCode)
	}
	if r := rawRequest(t, "GET", e.base+"/.well-known/oauth-protected-resource", "", nil, nil); r.StatusCode != 200 {
		t.Fatalf("root metadata: %d", r.StatusCode)
	}
	for _, p := range []string{"/.well-known/openid-configuration", "/.well-known/oauth-authorization-server/mcp/" + ep.Slug} {
		r := rawRequest(t, "GET", e.base+p, "", nil, nil)
		if r.StatusCode != 404 || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s", p, r.StatusCode, r.Header.Get("Content-Type"))
		}
	}
	var as map[string]any
	resp = rawRequest(t, "GET", e.base+"/.well-known/oauth-authorization-server", "", nil, nil)
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&as) != nil || as["issuer"] != e.base ||
		jsonText(as["code_challenge_methods_supported"]) != `["S256"]` || as["client_id_metadata_document_supported"] != true ||
		as["registration_endpoint"] != e.base+"/register" || as["token_endpoint"] != e.base+"/token" ||
		as["authorization_response_iss_parameter_supported"] != true {
		t.Fatalf("server metadata %d %v", resp.StatusCode, as)
	}
}

func jsonText(v any) string { b, _ := json.Marshal(v); return string(b) }

// The whole flow with DCR: the page shows the client, redirect host and endpoint; the token
// works on its endpoint for listing tools and draining a todo; a refresh rotates it.
func TestOAuthFlowDCR(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox", "later"}, nil)
	id := e.push(ep, "inbox", "from a hosted agent")
	c := newOAuthClient(t, e.base)
	c.redirect = "http://127.0.0.1:5555/callback" // registered without a port: loopback matches any (RFC 8252)

	verifier, challenge := pkce()
	status, body, form := c.page(c.authorizeURL(e.url(ep), challenge, nil))
	for _, want := range []string{"Test Host", "127.0.0.1", e.url(ep), "agent-ann", "inbox", "later", "claim_next",
		`name="approval_code"`, `name="decision" value="approve"`, `name="decision" value="deny"`, `<form method="post"`} {
		if status != 200 || !strings.Contains(body, want) {
			t.Fatalf("consent page (%d) lacks %q:\n%s", status, want, body)
		}
	}
	if strings.Contains(body, "<script") {
		t.Fatal("the consent page has a script")
	}
	resp := rawRequest(t, "GET", c.authorizeURL(e.url(ep), challenge, nil), "", nil, nil)
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "default-src 'none'") ||
		strings.Contains(csp, "-inline'") /* no inline script or style allowance */ || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("consent page headers: CSP %q", csp)
	}
	// Every authorization response names the issuer of the server metadata (RFC 9207).
	var meta struct{ Issuer string }
	if err := json.NewDecoder(rawRequest(t, "GET", e.base+"/.well-known/oauth-authorization-server", "", nil, nil).Body).Decode(&meta); err != nil || meta.Issuer == "" {
		t.Fatalf("server metadata: %v %+v", err, meta)
	}
	_, loc := c.answer(form, e.mintApproval(ep), "approve")
	u, _ := url.Parse(loc)
	if !strings.HasPrefix(loc, c.redirect+"?") || u.Query().Get("iss") != meta.Issuer {
		t.Fatalf("approve redirected to %s, want iss=%s", loc, meta.Issuer)
	}
	tr := c.exchange(u.Query().Get("code"), verifier, e.url(ep))
	if tr.Status != 200 || !strings.HasPrefix(tr.AccessToken, "sbat_") || !strings.HasPrefix(tr.RefreshToken, "sbrt_") ||
		tr.ExpiresIn < 3500 || tr.ExpiresIn > 3600 {
		t.Fatalf("token %+v", tr)
	}

	ctx := ctxT(t)
	ac, err := agentclient.Connect(ctx, e.url(ep), tr.AccessToken, &agentclientOptionsNoStream)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	tools, err := ac.Session.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools: %v", err)
	}
	claimed := call[claimNext](t, ac, "claim_next", map[string]any{"queue": "inbox"})
	if claimed.Todo == nil || claimed.Todo.ID != id {
		t.Fatalf("claim_next: %+v", claimed)
	}
	call[todo](t, ac, "complete", map[string]any{"id": id})
	if s := e.state(id); s != "done" {
		t.Fatalf("todo %s", s)
	}

	// Refresh: a new pair; the old access token stops.
	tr2 := c.refresh(tr.RefreshToken)
	if tr2.Status != 200 || tr2.AccessToken == tr.AccessToken || tr2.RefreshToken == tr.RefreshToken {
		t.Fatalf("refresh %+v", tr2)
	}
	if s := e.mcpStatus(ep, tr.AccessToken); s != 401 {
		t.Fatalf("old access token after refresh: %d", s)
	}
	if s := e.mcpStatus(ep, tr2.AccessToken); s != 200 {
		t.Fatalf("new access token: %d", s)
	}
	// The page denies too: the redirect carries access_denied, and the issuer. So does a refusal
	// before the page, and one of a client that sent no state (which gets none back).
	_, _, form = c.page(c.authorizeURL(e.url(ep), challenge, nil))
	_, loc = c.answer(form, "", "deny")
	if u, _ := url.Parse(loc); !strings.HasPrefix(loc, c.redirect+"?") || u.Query().Get("error") != "access_denied" ||
		u.Query().Get("iss") != meta.Issuer {
		t.Fatalf("deny: %s, want error=access_denied and iss=%s", loc, meta.Issuer)
	}
	_, loc, _ = c.page(c.authorizeURL("", challenge, url.Values{"state": {""}}))
	if u, _ := url.Parse(loc); u.Query().Get("error") != "invalid_target" || u.Query().Get("iss") != meta.Issuer ||
		u.Query().Has("state") {
		t.Fatalf("no resource, no state: %s", loc)
	}
	// Revocation (RFC 7009) of the refresh token ends the family.
	resp, err = c.http.PostForm(e.base+"/revoke", url.Values{"token": {tr2.RefreshToken}, "client_id": {c.id}})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %d", err, resp.StatusCode)
	}
	if s := e.mcpStatus(ep, tr2.AccessToken); s != 401 {
		t.Fatalf("access token after revoking its refresh token: %d", s)
	}
	if tr := c.refresh(tr2.RefreshToken); tr.Error != "invalid_grant" {
		t.Fatalf("revoked refresh token: %+v", tr)
	}
}

// A Client ID Metadata Document served over HTTPS on loopback (allowed by the setting; the
// test's CA given to the server) identifies the client without registration.
func TestOAuthFlowClientMetadataDocument(t *testing.T) {
	var docURL string
	var fetches atomic.Int32
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": docURL, "client_name": "Metadata Host",
			"redirect_uris": []string{testRedirect}, "token_endpoint_auth_method": "none"})
	}))
	ts.StartTLS()
	defer ts.Close()
	docURL = ts.URL + "/client.json"
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})

	e := newEnv(t, func(c *server.Config) {
		c.OAuth.AllowPrivateClients = true
		c.OAuth.ExtraCAs = [][]byte{caPEM}
	})
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := clientFor(t, e.base, docURL, testRedirect)
	verifier, challenge := pkce()
	status, body, form := c.page(c.authorizeURL(e.url(ep), challenge, nil))
	if status != 200 || !strings.Contains(body, "Metadata Host") {
		t.Fatalf("consent page %d %s", status, body)
	}
	_, loc := c.answer(form, e.mintApproval(ep), "approve")
	u, _ := url.Parse(loc)
	tr := c.exchange(u.Query().Get("code"), verifier, "")
	if tr.Status != 200 || e.mcpStatus(ep, tr.AccessToken) != 200 {
		t.Fatalf("token %+v", tr)
	}
	// The document was fetched once (GET and POST /authorize, /token all used the cache).
	if n := fetches.Load(); n != 1 {
		t.Fatalf("the document was fetched %d times", n)
	}
	// Without the setting, the same document on loopback is refused.
	strict := newEnv(t)
	sep := strict.vend("ann", []string{"inbox"}, nil)
	sc := clientFor(t, strict.base, docURL, testRedirect)
	if status, body, _ := sc.page(sc.authorizeURL(strict.url(sep), challenge, nil)); status == 200 || !strings.Contains(body, "private") {
		t.Fatalf("loopback document without the setting: %d %s", status, body)
	}
}

func TestOAuthRefusals(t *testing.T) {
	e := newEnv(t, func(c *server.Config) { c.OAuth.AccessTTL = 2 * time.Second })
	ep := e.vend("ann", []string{"inbox"}, nil)
	other := e.vend("bob", []string{"inbox"}, nil)
	c := newOAuthClient(t, e.base)

	t.Run("wrong or missing PKCE verifier", func(t *testing.T) {
		_, challenge := pkce()
		code := c.consent(e.url(ep), challenge, e.mintApproval(ep))
		wrong, _ := pkce()
		wantTokenError(t, c.exchange(code, wrong, ""), "invalid_grant")
		code = c.consent(e.url(ep), challenge, e.mintApproval(ep))
		if tr := c.exchange(code, "", ""); tr.AccessToken != "" || tr.Status != 400 {
			t.Fatalf("missing verifier: %+v", tr)
		}
	})
	t.Run("plain method", func(t *testing.T) {
		verifier, _ := pkce()
		status, loc, _ := c.page(c.authorizeURL(e.url(ep), verifier, url.Values{"code_challenge_method": {"plain"}}))
		if status != http.StatusSeeOther && status != http.StatusFound || !strings.Contains(loc, "error=invalid_request") {
			t.Fatalf("plain: %d %s", status, loc)
		}
	})
	t.Run("missing resource", func(t *testing.T) {
		_, challenge := pkce()
		status, loc, _ := c.page(c.authorizeURL("", challenge, nil))
		if !strings.Contains(loc, "error=invalid_target") {
			t.Fatalf("no resource: %d %s", status, loc)
		}
	})
	t.Run("reused code", func(t *testing.T) {
		verifier, challenge := pkce()
		code := c.consent(e.url(ep), challenge, e.mintApproval(ep))
		tr := c.exchange(code, verifier, "")
		if tr.Status != 200 {
			t.Fatalf("first exchange %+v", tr)
		}
		wantTokenError(t, c.exchange(code, verifier, ""), "invalid_grant")
		// What the code gave is revoked too (RFC 6749 §4.1.2).
		if s := e.mcpStatus(ep, tr.AccessToken); s != 401 {
			t.Fatalf("access token of a reused code: %d", s)
		}
	})
	t.Run("token on another endpoint", func(t *testing.T) {
		tr := e.tokens(c, ep)
		want401(t, rawRequest(t, "POST", e.url(other), tr.AccessToken, []byte(initBody), mcpHeaders), badCred)
		// Nor may the code be exchanged for another resource.
		verifier, challenge := pkce()
		code := c.consent(e.url(ep), challenge, e.mintApproval(ep))
		wantTokenError(t, c.exchange(code, verifier, e.url(other)), "invalid_request")
	})
	t.Run("expired token", func(t *testing.T) {
		tr := e.tokens(c, ep)
		if s := e.mcpStatus(ep, tr.AccessToken); s != 200 || tr.ExpiresIn > 2 {
			t.Fatalf("fresh token: %d %+v", s, tr)
		}
		var exp time.Time
		_ = e.pool.QueryRow(context.Background(), `SELECT max(expires_at) FROM switchboard.oauth_tokens WHERE kind = 'access'`).Scan(&exp)
		t.Logf("expires in %s", time.Until(exp))
		time.Sleep(2500 * time.Millisecond)
		wantUnauthenticated(t, rawRequest(t, "POST", e.url(ep), tr.AccessToken, []byte(initBody), mcpHeaders))
		// The refresh token still works after the access token expired.
		if tr2 := c.refresh(tr.RefreshToken); tr2.Status != 200 || e.mcpStatus(ep, tr2.AccessToken) != 200 {
			t.Fatalf("refresh after expiry: %+v", tr2)
		}
	})
	t.Run("streams end with their token", func(t *testing.T) {
		// A stream has no next request on which to refuse an expired token: the server ends
		// the 2026-07-28 listen and the 2025 GET stream at the token's expiry.
		tr := e.tokens(c, ep)
		var exp time.Time
		_ = e.pool.QueryRow(context.Background(), `SELECT max(expires_at) FROM switchboard.oauth_tokens WHERE kind = 'access'`).Scan(&exp)
		_, listen := openListen(t, e.url(ep), tr.AccessToken,
			map[string]any{"experimental": map[string]any{"claude/channel": map[string]any{}}}, map[string]any{})
		init := rawRequest(t, "POST", e.url(ep), tr.AccessToken, []byte(initBody), mcpHeaders)
		get := rawRequest(t, "GET", e.url(ep), tr.AccessToken, nil, map[string]string{
			"Accept": "text/event-stream", "Mcp-Session-Id": init.Header.Get("Mcp-Session-Id"), "Mcp-Protocol-Version": "2025-06-18"})
		if listen == nil || get.StatusCode != http.StatusOK {
			t.Fatalf("streams with a fresh token: listen %v, GET %d", listen != nil, get.StatusCode)
		}
		ends := map[string]<-chan time.Time{"listen": streamEnd(listen), "GET": streamEnd(get.Body)}
		for name, end := range ends {
			select {
			case at := <-end:
				if early := exp.Sub(at); early > 50*time.Millisecond {
					t.Fatalf("the %s stream ended %s before its token expired", name, early)
				}
			case <-time.After(time.Until(exp) + 2*time.Second):
				t.Fatalf("the %s stream outlived its token by 2 s", name)
			}
		}
	})
	t.Run("reused refresh token revokes the family", func(t *testing.T) {
		tr := e.tokens(c, ep)
		tr2 := c.refresh(tr.RefreshToken)
		if tr2.Status != 200 {
			t.Fatalf("refresh %+v", tr2)
		}
		wantTokenError(t, c.refresh(tr.RefreshToken), "invalid_grant")
		if s := e.mcpStatus(ep, tr2.AccessToken); s != 401 {
			t.Fatalf("access token of a reused family: %d", s)
		}
		wantTokenError(t, c.refresh(tr2.RefreshToken), "invalid_grant")
	})
	t.Run("unregistered redirect URI", func(t *testing.T) {
		_, challenge := pkce()
		bad := clientFor(t, e.base, c.id, "https://evil.example/callback")
		status, body, _ := bad.page(bad.authorizeURL(e.url(ep), challenge, nil))
		if status != 400 || !strings.Contains(body, "redirect") {
			t.Fatalf("unregistered redirect: %d %s", status, body)
		}
		// Registering one that is not https (and not loopback) is refused as well.
		resp := postJSON(t, e.base+"/register", map[string]any{"redirect_uris": []string{"http://example.com/cb"}})
		if resp.StatusCode != 400 {
			t.Fatalf("register http redirect: %d", resp.StatusCode)
		}
	})
	t.Run("client metadata document on a private address", func(t *testing.T) {
		_, challenge := pkce()
		cl := clientFor(t, e.base, "https://127.0.0.1:1/client.json", testRedirect)
		status, body, _ := cl.page(cl.authorizeURL(e.url(ep), challenge, nil))
		if status != 401 && status != 400 || !strings.Contains(body, "private") {
			t.Fatalf("private document: %d %s", status, body)
		}
		cl = clientFor(t, e.base, "https://169.254.169.254/latest/meta-data", testRedirect)
		if status, body, _ := cl.page(cl.authorizeURL(e.url(ep), challenge, nil)); !strings.Contains(body, "private") {
			t.Fatalf("link-local document: %d %s", status, body)
		}
	})
	t.Run("approval code wrong 5 times", func(t *testing.T) {
		_, challenge := pkce()
		good := e.mintApproval(ep)
		for i := range 5 {
			_, _, form := c.page(c.authorizeURL(e.url(ep), challenge, nil))
			if status, body := c.answer(form, "WRONG-"+itoa(i), "approve"); status != 403 || !strings.Contains(body, "wrong") {
				t.Fatalf("wrong try %d: %d", i, status)
			}
		}
		_, _, form := c.page(c.authorizeURL(e.url(ep), challenge, nil))
		if status, _ := c.answer(form, good, "approve"); status != 403 {
			t.Fatalf("a burnt code still works: %d", status)
		}
	})
	t.Run("CSRF token", func(t *testing.T) {
		_, challenge := pkce()
		_, _, form := c.page(c.authorizeURL(e.url(ep), challenge, nil))
		form.Set("csrf", "forged")
		if status, _ := c.answer(form, e.mintApproval(ep), "approve"); status != 403 {
			t.Fatalf("forged csrf: %d", status)
		}
	})
	t.Run("endpoint revoked between consent and token", func(t *testing.T) {
		third := e.vend("cid", []string{"inbox"}, nil)
		verifier, challenge := pkce()
		code := c.consent(e.url(third), challenge, e.mintApproval(third))
		e.exec(`SELECT switchboard.endpoint_revoke($1)`, third.ID)
		wantTokenError(t, c.exchange(code, verifier, ""), "invalid_grant")
	})
	// The metrics count what was issued and refused, by reason.
	for _, series := range []string{
		`switchboard_oauth_tokens_issued_total{grant_type="authorization_code"}`,
		`switchboard_oauth_tokens_issued_total{grant_type="refresh_token"}`,
		`switchboard_oauth_refused_total{at="token",reason="invalid_grant"}`,
		`switchboard_oauth_refused_total{at="authorize",reason="invalid_request"}`,
		`switchboard_oauth_refused_total{at="authorize",reason="invalid_target"}`,
		`switchboard_oauth_refused_total{at="consent",reason="wrong_code"}`,
		`switchboard_oauth_refused_total{at="consent",reason="csrf"}`,
	} {
		if v := metricValue(t, e.base, series); v < 1 {
			t.Errorf("%s = %v", series, v)
		}
	}
}

// Revoking a grant, rotating the endpoint's credential, or revoking the endpoint ends its OAuth
// tokens; the purge removes what expired.
func TestOAuthGrantsEndWithTheEndpoint(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := newOAuthClient(t, e.base)

	tr := e.tokens(c, ep)
	var grants []map[string]any
	var raw []byte
	if err := e.pool.QueryRow(context.Background(), `SELECT switchboard.oauth_grant_list($1)`, ep.ID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(raw, &grants)
	if len(grants) != 1 || grants[0]["client_name"] != "Test Host" || grants[0]["live_tokens"] != float64(2) {
		t.Fatalf("grants %s", raw)
	}
	e.exec(`SELECT switchboard.oauth_grant_revoke($1)`, grants[0]["grant_id"])
	if s := e.mcpStatus(ep, tr.AccessToken); s != 401 {
		t.Fatalf("after revoke-grant: %d", s)
	}
	wantTokenError(t, c.refresh(tr.RefreshToken), "invalid_grant")

	tr = e.tokens(c, ep)
	e.exec(`SELECT switchboard.endpoint_rotate($1, $2, 'sbk_rotated', NULL)`, ep.ID, make([]byte, 32))
	if s := e.mcpStatus(ep, tr.AccessToken); s != 401 {
		t.Fatalf("after rotate: %d", s)
	}

	tr = e.tokens(c, ep)
	e.exec(`SELECT switchboard.endpoint_revoke($1)`, ep.ID)
	if s := e.mcpStatus(ep, tr.AccessToken); s != 401 {
		t.Fatalf("after revoke: %d", s)
	}

	// Purge: everything above is expired or revoked.
	e.exec(`UPDATE switchboard.oauth_clients SET expires_at = now() - interval '1 s'`)
	e.exec(`SELECT switchboard.purge(false)`)
	var left int
	if err := e.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM switchboard.oauth_tokens) +
		(SELECT count(*) FROM switchboard.oauth_grants) + (SELECT count(*) FROM switchboard.oauth_approval_codes) +
		(SELECT count(*) FROM switchboard.oauth_clients)`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("after purge %d rows left (%v)", left, err)
	}
}

// Registrations are rate-limited across the server.
func TestOAuthRegistrationRateLimit(t *testing.T) {
	e := newEnv(t, func(c *server.Config) { c.OAuth.RegistrationsPerMinute = 2 })
	body := map[string]any{"redirect_uris": []string{testRedirect}}
	for i, want := range []int{201, 201, 429} {
		if s := postJSON(t, e.base+"/register", body).StatusCode; s != want {
			t.Fatalf("registration %d: %d, want %d", i, s, want)
		}
	}
}
