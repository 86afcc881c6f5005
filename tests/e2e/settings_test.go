package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"switchboard/tests/testproc"
)

// settingsSet runs `switchboard settings set KEY VALUE` against the test database.
func (e *env) settingsSet(t *testing.T, key, value string) {
	t.Helper()
	cmd := exec.Command(testproc.Switchboard(t), "settings", "set", key, value, "--json")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+e.dsn)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("settings set %s %s: %v\n%s", key, value, err, out)
	}
}

// `settings set` reaches a running server at once (settings_set notifies switchboard_settings
// on the doorbell's LISTEN connection): with ring_again_seconds set to 1 from the default 15, a
// todo rung to a silent session is rung again on the working one well before 15 s; and the
// other doorbell settings apply well before the doorbell's 30 s re-read.
func TestSettingsSetAppliesAtOnce(t *testing.T) {
	testproc.Switchboard(t) // built before anything is timed
	e := newEnv(t)
	bell := e.srv.Doorbell()
	if _, again, _ := bell.Settings(); again != 15*time.Second {
		t.Fatalf("ring_again_seconds in force %v, want the default 15 s", again)
	}
	ep := e.vend("ann", []string{"inbox"}, nil)
	working := e.connect(t, ep, nil)
	silent := e.connect(t, ep, nil) // holds its GET stream, never calls a tool
	<-working.StreamReady()
	<-silent.StreamReady()

	set := time.Now()
	e.settingsSet(t, "ring_again_seconds", "1")
	eventually(t, soon, "ring_again_seconds applied", func() bool {
		_, again, _ := bell.Settings()
		return again == time.Second
	})
	t.Logf("ring_again_seconds applied %v after settings set started", time.Since(set))

	// Round robin: one of two todos rings the silent session first.
	for i := range 2 {
		pushed := time.Now()
		id := e.push(ep, "inbox", fmt.Sprint("todo ", i))
		ctx, cancel := context.WithTimeout(context.Background(), soon) // ring_again_seconds was 15
		n, err := working.WaitNotification(ctx, id)
		cancel()
		if err != nil {
			t.Fatalf("todo %d: the working session was not rung within %v", i, soon)
		}
		d := n.At.Sub(pushed)
		call[todo](t, working, "claim", map[string]any{"id": id})
		call[todo](t, working, "complete", map[string]any{"id": id})
		if d > 500*time.Millisecond {
			t.Logf("todo %d went to the silent session first; rung again on the working one after %v", i, d)
			for _, key := range []struct{ k, v string }{{"claim_wait_max_seconds", "7"}, {"doorbell_window_ms", "25"}} {
				start := time.Now()
				e.settingsSet(t, key.k, key.v)
				eventually(t, soon, key.k+" applied", func() bool {
					w, _, wait := bell.Settings()
					return map[string]bool{"claim_wait_max_seconds": wait == 7*time.Second,
						"doorbell_window_ms": w == 25*time.Millisecond}[key.k]
				})
				t.Logf("%s applied %v after settings set started", key.k, time.Since(start))
			}
			return
		}
	}
	t.Fatal("neither todo rang the silent session first")
}
