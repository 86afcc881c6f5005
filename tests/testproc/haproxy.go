package testproc

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// HAProxy is SWITCHBOARD_HAPROXY (make test installs HAProxy and sets it), else haproxy on
// PATH. Without either the test cannot run: it fails under make test, skips elsewhere.
func HAProxy(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SWITCHBOARD_HAPROXY"); p != "" {
		return p
	}
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	t.Skip("haproxy not installed (make test installs it: tests/lb/ensure-haproxy.sh)")
	return ""
}

// RunHAProxy runs HAProxy with the configuration cfg until the test ends; its output is shown
// when the test failed.
func RunHAProxy(t testing.TB, cfg string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(HAProxy(t), "-db", "-f", path) // -db: foreground
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := &LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("haproxy output:\n%s", out.String())
		}
	})
}

// StartDocsHAProxy runs docs/haproxy.cfg, the configuration operators are given, on front
// with the two replicas' addresses (host:port), waits until four /readyz in a row answer 200
// (round robin: both replicas are up) and returns the balancer's base URL.
func StartDocsHAProxy(t testing.TB, front string, replicas ...string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	example, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(example)
	for from, to := range map[string]string{"127.0.0.1:8080": front, "127.0.0.1:8081": replicas[0], "127.0.0.1:8082": replicas[1]} {
		if !strings.Contains(cfg, from) {
			t.Fatalf("docs/haproxy.cfg no longer names %s", from)
		}
		cfg = strings.ReplaceAll(cfg, from, to)
	}
	RunHAProxy(t, cfg)
	base := "http://" + front
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		up := 0
		for range 4 {
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				break
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				up++
			}
		}
		if up == 4 {
			return base
		}
		if time.Now().After(end) {
			t.Fatal("timed out waiting for haproxy up with both replicas")
		}
	}
}
