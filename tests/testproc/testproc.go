// Package testproc helps tests that run switchboard as a process or read a server's logs: it
// builds cmd/switchboard once per test binary, collects log output written from several
// goroutines, and runs HAProxy in front of replicas (haproxy.go). It imports nothing but the
// standard library, so tests/sdk (its own module, with the released go-sdk) uses it too.
package testproc

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
	buildOut  []byte
)

// Switchboard builds cmd/switchboard on first use and returns the binary's path. Call Cleanup
// from TestMain after m.Run to remove it.
func Switchboard(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "switchboard-test-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "switchboard")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		buildOut, buildErr = exec.Command(gobin, "build", "-o", binPath, "switchboard/cmd/switchboard").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build switchboard: %v\n%s", buildErr, buildOut)
	}
	return binPath
}

// Cleanup removes the binary Switchboard built, if any.
func Cleanup() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// LogBuffer is a bytes.Buffer that several goroutines may write to (a server's log output).
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
