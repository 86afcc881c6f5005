package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"switchboard/tests/testproc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testproc.Cleanup()
	os.Exit(code)
}

// serveProcess runs `switchboard serve` on a free loopback port. term sends SIGTERM and
// returns the exit status (-1 if it did not exit within 10 s).
func serveProcess(t *testing.T, bin, dsn string) (in *instance, term func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return serveProcessAt(t, bin, dsn, addr)
}

// serveProcessAt is serveProcess on a given address, with extra environment.
func serveProcessAt(t *testing.T, bin, dsn, addr string, env ...string) (in *instance, term func() int) {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // never outlive the test
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, "SWITCHBOARD_ADDR="+addr, "SWITCHBOARD_REAPER_INTERVAL=1s")
	cmd.Env = append(cmd.Env, env...)
	out := &testproc.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	term = func() int {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return cmd.ProcessState.ExitCode()
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return -1
		}
	}
	t.Cleanup(func() {
		term()
		if t.Failed() {
			t.Logf("serve %s output:\n%s", addr, out.String())
		}
	})
	in = &instance{base: "http://" + addr}
	eventually(t, 15*time.Second, "serve healthz", func() bool {
		resp, err := http.Get(in.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return in, term
}

// Two `switchboard serve` processes on one database: a todo pushed with `switchboard todo push`
// rings the agent on whichever process it is connected to. SIGTERM then ends each one cleanly.
func TestTwoServeProcesses(t *testing.T) {
	bin := testproc.Switchboard(t)
	e := newEnv(t)
	p1, term1 := serveProcess(t, bin, e.dsn)
	p2, term2 := serveProcess(t, bin, e.dsn)
	eventually(t, 10*time.Second, "three doorbell listeners", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = 'switchboard-doorbell' AND datname = current_database()`).Scan(&n)
		return n == 3 // the in-process server's and the two processes'
	})

	ep := e.vend("ann", []string{"inbox"}, nil)
	on1 := p1.connect(t, ep, nil)
	on2 := p2.connect(t, ep, nil)
	push := func() string {
		cmd := exec.Command(bin, "todo", "push", "--endpoint", ep.ID, "--queue", "inbox", "--title", "from the CLI", "--json")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+e.dsn)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("todo push: %v %s", err, out)
		}
		var res struct {
			ID      string `json:"id"`
			Created bool   `json:"created"`
		}
		if err := json.Unmarshal(out, &res); err != nil || res.ID == "" {
			t.Fatalf("todo push output %s", out)
		}
		return res.ID
	}
	id := push()
	ctx, cancel := context.WithTimeout(context.Background(), soon)
	defer cancel()
	if _, err := on1.WaitNotification(ctx, id); err != nil {
		t.Fatalf("process 1: %v", err)
	}
	if _, err := on2.WaitNotification(ctx, id); err != nil {
		t.Fatalf("process 2: %v", err)
	}
	// The agent works through either process.
	if got := call[claimNext](t, on2, "claim_next", nil); got.Empty || got.Todo.ID != id {
		t.Fatalf("claim_next via process 2: %+v", got)
	}

	// Graceful shutdown on SIGTERM: exit status 0, promptly, even with a session open.
	for i, term := range []func() int{term1, term2} {
		start := time.Now()
		if code := term(); code != 0 {
			t.Fatalf("process %d exit status %d", i+1, code)
		}
		t.Logf("process %d stopped in %v", i+1, time.Since(start))
	}
}
