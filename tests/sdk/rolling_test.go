package sdk

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchboard/tests/testproc"
)

// A rolling restart for MCP 2026-07-28 (issue 26 part 5): two replicas behind docs/haproxy.cfg,
// four go-sdk v1.8.0 clients (released, default options) draining with waiting claim_next
// calls while todos keep arriving, and each replica in turn gets SIGTERM, exits 0 and is
// started again on its address. Every todo is done exactly once, and the only client errors
// are calls in flight on a stopping replica, which the agent tries again.
func TestRollingRestart2026(t *testing.T) {
	testproc.HAProxy(t) // skip early when it is missing
	e := newEnv(t)
	addrs := []string{freeAddr(t), freeAddr(t)}
	replicas := []*replica{e.serveAt(addrs[0]), e.serveAt(addrs[1])}
	front := freeAddr(t)
	testproc.StartDocsHAProxy(t, front, addrs...)

	ep := e.vend("roll", []string{"inbox"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The sender: a todo every 20 ms until the restarts are over.
	var pushed atomic.Int64
	stopPush := make(chan struct{})
	var pushing sync.WaitGroup
	pushing.Add(1)
	go func() {
		defer pushing.Done()
		for i := 0; ; i++ {
			select {
			case <-stopPush:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := e.pool.Exec(ctx, `SELECT switchboard.create_todo($1, 'inbox', $2)`, ep.ID, fmt.Sprintf("todo %d", i)); err != nil {
				t.Errorf("push: %v", err)
				return
			}
			pushed.Add(1)
		}
	}()

	// The agents. A call that fails without an answer (the replica stopped under it) is tried
	// again; a tool error is an answer and fails the test.
	const agents = 4
	var mu sync.Mutex
	completed := map[string]int{} // todo id -> completes that landed
	var clientErrors []string
	var retried atomic.Int64
	stopDrain := make(chan struct{})
	var draining sync.WaitGroup
	for a := range agents {
		cs, rec := connect(t, "http://"+front+"/mcp/"+ep.Slug, ep.Cred, "", nil)
		if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Fatalf("agent %d negotiated %s", a, v)
		}
		draining.Add(1)
		go func() {
			defer draining.Done()
			try := func(name string, args map[string]any, out any) error {
				var err error
				for attempt := 0; attempt < 5; attempt++ {
					if err = callJSON(ctx, cs, name, args, out); err == nil || strings.Contains(err.Error(), "tool error") {
						return err
					}
					mu.Lock()
					clientErrors = append(clientErrors, fmt.Sprintf("agent %d %s: %v", a, name, err))
					mu.Unlock()
					retried.Add(1)
					time.Sleep(100 * time.Millisecond)
				}
				return err
			}
			for {
				select {
				case <-stopDrain:
					return
				default:
				}
				var c claimResult
				if err := try("claim_next", map[string]any{"wait_seconds": 2, "lease_ttl_seconds": 5}, &c); err != nil {
					t.Errorf("agent %d claim_next: %v", a, err)
					return
				}
				if c.Empty {
					continue
				}
				var res map[string]any
				err := try("complete", map[string]any{"id": c.Todo.ID}, &res)
				if err != nil && !strings.Contains(err.Error(), "conflict") {
					// conflict: a first attempt landed and its answer was lost, or the lease ran
					// out after a lost claim_next answer and another agent has the todo.
					t.Errorf("agent %d complete %s: %v", a, c.Todo.ID, err)
					return
				}
				if err == nil {
					mu.Lock()
					completed[c.Todo.ID]++
					mu.Unlock()
				}
			}
		}()
		t.Cleanup(func() {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.sessionID) != 0 {
				t.Errorf("agent %d: Mcp-Session-Id on an answer", a)
			}
		})
	}

	time.Sleep(2 * time.Second)
	for i, addr := range addrs {
		// Both generations of replica serve: docs/haproxy.cfg balances by open connections.
		if n := strings.Count(replicas[i].out.String(), `"mcp_method":"tools/call"`); n == 0 {
			t.Fatalf("replica %d answered no tools/call before its SIGTERM", i+1)
		}
		start := time.Now()
		if code := replicas[i].term(); code != 0 {
			t.Fatalf("replica %d exit status %d", i+1, code)
		}
		t.Logf("replica %d drained and exited %v after SIGTERM", i+1, time.Since(start).Round(time.Millisecond))
		replicas[i] = e.serveAt(addr)
		time.Sleep(4 * time.Second) // HAProxy marks it up after two good checks a second apart
	}
	close(stopPush)
	pushing.Wait()

	total := int(pushed.Load())
	eventually(t, 30*time.Second, "every todo done", func() bool {
		return e.count(`SELECT count(*) FROM switchboard.todos WHERE endpoint_id = $1 AND state <> 'done'`, ep.ID) == 0
	})
	close(stopDrain)
	draining.Wait()

	if n := e.count(`SELECT count(*) FROM switchboard.todos WHERE endpoint_id = $1 AND state = 'done'`, ep.ID); n != total {
		t.Fatalf("%d of %d todos done", n, total)
	}
	mu.Lock()
	defer mu.Unlock()
	doubled := 0
	for _, n := range completed {
		if n > 1 {
			doubled++
		}
	}
	t.Logf("%d todos pushed and done, %d completed by the agents (the rest: a complete whose answer was lost), %d doubled; %d calls retried",
		total, len(completed), doubled, retried.Load())
	for _, s := range clientErrors {
		t.Log(s)
	}
	if doubled != 0 {
		t.Fatalf("%d todos completed twice", doubled)
	}
}
