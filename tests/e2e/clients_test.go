package e2e

// Real clients against a real server: the official TypeScript SDK (tests/ts/sdk.test.mjs, run by
// node's test runner) and the official MCP conformance suite. Both are installed from
// tests/ts/package-lock.json with `npm ci` (make test does it); the lockfile also pins a Node 22
// (the npm package "node"), which the conformance suite needs and the SDK tests use too.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

const tsDir = "../ts"

// nodeBin is the lockfile's Node; the test fails (not skips) without it, so that a missing
// install cannot pass for a green run.
func nodeBin(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(tsDir, "node_modules", ".bin", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("tests/ts is not installed (%v): run `npm ci --prefix tests/ts` (make test does)", err)
	}
	return bin
}

// runNode runs the lockfile's Node in tests/ts with args and env, logs its output and fails the
// test when it exits non-zero.
func runNode(t *testing.T, timeout time.Duration, env []string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin(t), args...)
	cmd.Dir = tsDir
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "NO_COLOR=1", "FORCE_COLOR=0")
	out, err := cmd.CombinedOutput()
	t.Logf("node %v:\n%s", args, out)
	if err != nil {
		t.Fatalf("node %v: %v", args, err)
	}
}

// pushHook is a loopback HTTP hook through which a node test creates a todo with SQL after its
// client has connected: POST ?queue=&title= answers {"todo_id": ...}.
func (e *env) pushHook(t *testing.T, ep endpoint) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		err := e.pool.QueryRow(r.Context(), `SELECT todo_id FROM switchboard.create_todo($1, $2, $3)`,
			ep.ID, r.FormValue("queue"), r.FormValue("title")).Scan(&id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"todo_id": id})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestTypeScriptSDK runs tests/ts/sdk.test.mjs against an all-verbs endpoint.
func TestTypeScriptSDK(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ts", []string{"inbox", "other"}, nil)
	runNode(t, 60*time.Second, []string{
		"SB_MCP_URL=" + e.url(ep), "SB_CREDENTIAL=" + ep.Cred, "SB_PUSH_URL=" + e.pushHook(t, ep),
	}, "--test", "--test-reporter=spec", "sdk.test.mjs")
}

// TestConformance runs every server scenario of the MCP conformance suite against an all-verbs
// endpoint. The suite cannot send a bearer credential, so it talks to a loopback proxy that adds
// one (and keeps the Host header, for the DNS-rebinding scenario). conformance-expected-failures.yml
// names the scenarios that need the reference server's demo tools, prompts or resources.
func TestConformance(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("conformance", []string{"inbox"}, nil)
	target, err := url.Parse(e.base)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // event streams pass through at once
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+ep.Cred)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	results := t.TempDir()
	t.Cleanup(func() { logFailedChecks(t, results) }) // before the folder goes
	runNode(t, 120*time.Second, nil, "node_modules/@modelcontextprotocol/conformance/dist/index.js",
		"server", "--suite", "all", "--url", proxy.URL+"/mcp/"+ep.Slug, "--expected-failures", "conformance-expected-failures.yml",
		"--output-dir", results)
}

// logFailedChecks logs, when the test failed, every failed check the suite saved with its
// message and details: its summary names an unexpected failure but not why.
func logFailedChecks(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "checks.json"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var checks []struct {
			ID, Status, ErrorMessage string
			Details                  json.RawMessage
		}
		_ = json.Unmarshal(raw, &checks)
		for _, c := range checks {
			if c.Status == "FAILURE" {
				t.Logf("%s: %s: %s %s", filepath.Base(filepath.Dir(f)), c.ID, c.ErrorMessage, c.Details)
			}
		}
	}
}
