package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"switchboard/tests/testproc"
)

// captured holds the tests whose server logs are kept for a search (captureLogs).
var captured sync.Map // *testing.T -> *testproc.LogBuffer

// captureLogs keeps, at debug level, every log line of the servers the test starts afterwards.
func captureLogs(t *testing.T) *testproc.LogBuffer {
	b := &testproc.LogBuffer{}
	captured.Store(t, b)
	t.Cleanup(func() { captured.Delete(t) })
	return b
}

// testLogger writes server logs to the test log only when SWITCHBOARD_TEST_LOG is set (and to
// the test's buffer after captureLogs).
func testLogger(t *testing.T) *slog.Logger {
	if b, ok := captured.Load(t); ok {
		return slog.New(slog.NewJSONHandler(b.(*testproc.LogBuffer), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if os.Getenv("SWITCHBOARD_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewJSONHandler(&tlog{t: t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlog struct {
	mu sync.Mutex
	t  *testing.T
}

func (l *tlog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// No OAuth secret in any log line: the approval codes, PKCE verifiers, authorization codes,
// access and refresh tokens of a flow, its refusals and a revocation are searched for in
// everything the server logged at debug level.
func TestNoOAuthSecretInLogs(t *testing.T) {
	logs := captureLogs(t)
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	other := e.vend("bob", []string{"inbox"}, nil)
	c := newOAuthClient(t, e.base)

	var secrets []string
	verifier, challenge := pkce()
	approval := e.mintApproval(ep)
	_, _, form := c.page(c.authorizeURL(e.url(ep), challenge, nil))
	wrong := "WRONG-" + randomText()
	c.answer(form, wrong, "approve") // a wrong approval code
	_, _, form = c.page(c.authorizeURL(e.url(ep), challenge, nil))
	_, loc := c.answer(form, approval, "approve")
	u, _ := url.Parse(loc)
	code := u.Query().Get("code")
	badVerifier, _ := pkce()
	c.exchange(code, badVerifier, "") // a wrong verifier
	tr := e.tokens(c, ep)
	e.mcpStatus(ep, tr.AccessToken)
	e.mcpStatus(other, tr.AccessToken) // on another endpoint
	tr2 := c.refresh(tr.RefreshToken)
	c.refresh(tr.RefreshToken) // reuse
	_, _ = c.http.PostForm(e.base+"/revoke", url.Values{"token": {tr2.AccessToken}, "client_id": {c.id}})
	secrets = append(secrets, approval, wrong, verifier, badVerifier, code, tr.AccessToken, tr.RefreshToken,
		tr2.AccessToken, tr2.RefreshToken)
	for _, s := range form["csrf"] {
		secrets = append(secrets, s)
	}
	time.Sleep(100 * time.Millisecond)

	out := logs.String()
	for _, want := range []string{`"msg":"oauth consent refused"`, `"msg":"oauth token issued"`, `"msg":"oauth request refused"`,
		`"msg":"http request"`, `"msg":"oauth consent approved"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("the logs lack %s: the search would prove nothing", want)
		}
	}
	for _, sec := range secrets {
		if len(sec) < 16 {
			t.Fatalf("a secret shorter than 16 characters (%d)", len(sec))
		}
		if strings.Contains(out, sec) || strings.Contains(out, sec[:16]) || strings.Contains(out, url.QueryEscape(sec)) {
			t.Errorf("a secret (%.6s…) is in the logs", sec)
		}
	}
	for _, prefix := range []string{"sbat_", "sbrt_", "sbac_"} {
		if strings.Contains(out, prefix) {
			t.Errorf("a %s value is in the logs", prefix)
		}
	}
}

func randomText() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
