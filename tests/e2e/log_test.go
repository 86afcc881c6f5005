package e2e

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
)

// testLogger writes server logs to the test log only when SWITCHBOARD_TEST_LOG is set.
func testLogger(t *testing.T) *slog.Logger {
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
