package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"switchboard/tests/testdb"
)

// The demo banner's commands run as printed: the operator lines (the DATABASE_URL export, the
// CLI by its real path, psql) in a fresh shell with nothing else set, and the Claude Code lines
// and the .mcp.json block have the exact shape Claude Code takes.
func TestDemoBannerCommandsRun(t *testing.T) {
	dsn := testdb.New(t)
	r := sb(t, dsn, "demo")
	if r.code != 0 {
		t.Fatalf("demo: exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(r.stdout, "\n")
	after := func(heading string, n int) []string {
		for i, l := range lines {
			if strings.HasPrefix(l, heading) && i+n < len(lines) {
				out := lines[i+1 : i+1+n]
				for j := range out {
					out[j] = strings.TrimPrefix(out[j], "  ")
				}
				return out
			}
		}
		t.Fatalf("no %q in the banner:\n%s", heading, r.stdout)
		return nil
	}

	cred := regexp.MustCompile(`sbk_[A-Za-z0-9_-]+`).FindString(r.stdout)
	url := regexp.MustCompile(`http://\S+/mcp/demo-agent-[0-9a-f]+`).FindString(r.stdout)
	claude := after("Claude Code: register", 2)
	if want := `claude mcp add --transport http switchboard ` + url + ` --header "Authorization: Bearer ` + cred + `"`; claude[0] != want || claude[1] != "claude mcp list" {
		t.Errorf("Claude Code lines %q, want %q", claude, want)
	}
	if ch := after("The doorbell", 2)[1]; ch != "claude --dangerously-load-development-channels server:switchboard" {
		t.Errorf("channels line %q", ch)
	}
	start, end := strings.Index(r.stdout, "\n{\n"), strings.Index(r.stdout, "\n}\n")
	var cfg struct {
		MCPServers map[string]struct {
			Type, URL string
			Headers   map[string]string
		} `json:"mcpServers"`
	}
	if start < 0 || end < start || json.Unmarshal([]byte(r.stdout[start:end+2]), &cfg) != nil {
		t.Fatalf("no .mcp.json block:\n%s", r.stdout)
	}
	if s := cfg.MCPServers["switchboard"]; s.Type != "http" || s.URL != url || s.Headers["Authorization"] != "Bearer "+cred {
		t.Errorf(".mcp.json block %+v", cfg)
	}

	ops := after("In another shell", 3)
	if !strings.HasPrefix(ops[0], "export DATABASE_URL=") || !strings.Contains(ops[0], dsn) {
		t.Errorf("export line %q does not export the URL demo was given", ops[0])
	}
	script := strings.Join(ops, "\n")
	if _, err := exec.LookPath("psql"); err != nil {
		t.Logf("no psql here: its line is not run")
		script = strings.Join(ops[:2], "\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-e", "-c", script)
	// From the directory demo ran in, with nothing but PATH: the export must bring what the rest needs.
	sh.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("banner commands failed: %v\n%s\n%s", err, script, out)
	}
	if !strings.Contains(string(out), "created todo") || (len(script) > len(strings.Join(ops[:2], "\n")) &&
		!strings.Contains(string(out), "Hello from the CLI")) {
		t.Fatalf("banner commands printed:\n%s", out)
	}
}
