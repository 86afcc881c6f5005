package e2e

// The hosts people really point at an endpoint, as released, from tests/ts/package-lock.json:
// Claude Code (`claude mcp add` and `claude mcp list`, which need no login) and MCP Inspector's
// CLI with --strict (schema problems are errors). Neither shares code with the server's SDK.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tsTool runs a program installed in tests/ts/node_modules/.bin, in dir, with a home of its own
// (Claude Code writes its settings there) and no traffic beyond loopback; it returns the output
// and fails the test when the program fails.
func tsTool(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(tsDir, "node_modules", ".bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("tests/ts is not installed (%v): run `npm ci --prefix tests/ts` (make test does)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...) // claude is a native binary
	if name != "claude" {                         // a JavaScript bin: the lockfile's Node 22 (Inspector needs 22)
		cmd = exec.CommandContext(ctx, nodeBin(t), append([]string{bin}, args...)...)
	}
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "NO_COLOR=1", "FORCE_COLOR=0", "CI=1",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", name, strings.Join(args[:min(len(args), 2)], " "), out)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args[:min(len(args), 2)], err)
	}
	return string(out)
}

// Claude Code 2.1.328 adds the endpoint as the README's quick start says and reports it
// connected (it speaks 2026-07-28: server/discover, then tools/list).
func TestClaudeCodeConnects(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("claude", []string{"inbox"}, nil)
	dir := t.TempDir()
	tsTool(t, dir, "claude", "mcp", "add", "--transport", "http", "switchboard", e.url(ep),
		"--header", "Authorization: Bearer "+ep.Cred)
	out := tsTool(t, dir, "claude", "mcp", "list")
	if !strings.Contains(out, "switchboard:") || !strings.Contains(out, "Connected") {
		t.Fatalf("claude mcp list:\n%s", out)
	}
	if strings.Contains(out, ep.Cred) {
		t.Fatal("claude mcp list printed the credential")
	}
}

// MCP Inspector 2.12.0's CLI, --strict, lists every tool of an all-verbs endpoint with no schema
// problem, and each tool carries its title and all four hints.
func TestInspectorStrict(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("inspector", []string{"inbox"}, nil)
	out := tsTool(t, t.TempDir(), "mcp-inspector", "--cli", e.url(ep), "--transport", "http",
		"--header", "Authorization: Bearer "+ep.Cred, "--method", "tools/list", "--strict")
	var listed struct {
		Tools []struct {
			Name        string
			Title       string
			Annotations map[string]any
		}
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &listed); err != nil {
		t.Fatalf("inspector output: %v", err)
	}
	if len(listed.Tools) != 24 {
		t.Fatalf("inspector listed %d tools, want 24", len(listed.Tools))
	}
	for _, tool := range listed.Tools {
		for _, hint := range []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} {
			if _, ok := tool.Annotations[hint].(bool); !ok || tool.Title == "" {
				t.Fatalf("%s: title %q, annotations %v", tool.Name, tool.Title, tool.Annotations)
			}
		}
	}
}
