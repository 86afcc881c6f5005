package e2e

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"switchboard/server"
)

// chromiumBin is the browser tests/ts/oauth.test.mjs drives: SWITCHBOARD_CHROMIUM (make test
// sets it from tests/ts/ensure-chromium.sh), else chromium on PATH. Missing fails the test.
func chromiumBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SWITCHBOARD_CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("no chromium: run tests/ts/ensure-chromium.sh (make test does)")
	}
	return p
}

// TestOAuthTypeScript runs tests/ts/oauth.test.mjs: the official TypeScript SDK (DCR, then a
// client metadata document this test serves over HTTPS on loopback) and mcp-remote 0.15.1,
// each answered in headless Chromium, against a server with 3 s access tokens.
func TestOAuthTypeScript(t *testing.T) {
	const ttl = 3
	var docURL string
	doc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": docURL, "client_name": "Switchboard SDK test (metadata document)",
			"redirect_uris": []string{"http://127.0.0.1/callback"}, "token_endpoint_auth_method": "none",
			"grant_types": []string{"authorization_code", "refresh_token"}, "response_types": []string{"code"}})
	}))
	doc.StartTLS()
	t.Cleanup(doc.Close)
	docURL = doc.URL + "/oauth/client.json"

	e := newEnv(t, func(c *server.Config) {
		c.OAuth.AccessTTL = ttl * time.Second
		c.OAuth.AllowPrivateClients = true // the document is on loopback
		c.OAuth.ExtraCAs = [][]byte{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: doc.Certificate().Raw})}
	})
	ep := e.vend("hosted", []string{"inbox"}, nil)
	mint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"code": e.mintApproval(ep)})
	}))
	t.Cleanup(mint.Close)
	shot := os.Getenv("SWITCHBOARD_CONSENT_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "consent.png")
	}
	runNode(t, 180*time.Second, []string{
		"SB_MCP_URL=" + e.url(ep), "SB_MINT_URL=" + mint.URL, "SB_PUSH_URL=" + e.pushHook(t, ep),
		"SB_CIMD_URL=" + docURL, "SB_CHROMIUM=" + chromiumBin(t), "SB_ACCESS_TTL=" + strconv.Itoa(ttl),
		"SB_SCREENSHOT=" + shot,
	}, "--test", "--test-reporter=spec", "--test-concurrency=1", "oauth.test.mjs")
}
