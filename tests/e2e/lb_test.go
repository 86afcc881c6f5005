package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchboard/tests/e2e/agentclient"
	"switchboard/tests/testproc"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Two `switchboard serve` replicas on one database behind HAProxy with the documented sticky
// routing on Mcp-Session-Id: sessions initialized through it land on both replicas, every
// later request (tool calls, the doorbell's GET stream) reaches its session, and when a replica
// stops mid-session its agent initializes again through the balancer and loses no todo.
func TestReplicasBehindHAProxy(t *testing.T) {
	testproc.HAProxy(t) // skip early when it is missing
	bin := testproc.Switchboard(t)
	e := newEnv(t)
	r1, term1 := serveProcess(t, bin, e.dsn)
	r2, term2 := serveProcess(t, bin, e.dsn)
	replicas := []*instance{r1, r2}
	terms := []func() int{term1, term2}
	lb := testproc.StartDocsHAProxy(t, freeAddr(t), strings.TrimPrefix(r1.base, "http://"), strings.TrimPrefix(r2.base, "http://"))
	lbIn := &instance{base: lb}

	ep := e.vend("lb", []string{"inbox"}, nil)
	// Four sessions through the balancer: least-connections (each session holds its doorbell
	// stream) spreads them over both replicas.
	var agents []*agentclient.Client
	for range 4 {
		agents = append(agents, lbIn.connect(t, ep, nil))
	}
	sessionsOn := func(in *instance) float64 { return metricValue(t, in.base, "switchboard_mcp_sessions") }
	if a, b := sessionsOn(r1), sessionsOn(r2); a+b != 4 || a == 0 || b == 0 {
		t.Fatalf("sessions per replica %v/%v, want 4 on both", a, b)
	}

	// Tool calls on every session reach their replica (a balancer without stickiness sends
	// half of them to the other one: 404 unknown session).
	for i, a := range agents {
		for range 5 {
			var out struct {
				Todos []todo `json:"todos"`
			}
			if err := a.CallInto(ctxT(t), "list_todos", map[string]any{}, &out); err != nil {
				t.Fatalf("agent %d list_todos through the balancer: %v", i, err)
			}
		}
	}
	// The doorbell reaches every session through its GET stream: each replica rings one of
	// its sessions per todo, round robin, so with six todos every session hears of some.
	var rung []string
	for i := range 6 {
		rung = append(rung, e.push(ep, "inbox", fmt.Sprintf("ring %d", i)))
	}
	for i, a := range agents {
		select {
		case <-a.Notifications():
		case <-time.After(5 * time.Second):
			t.Fatalf("agent %d: no doorbell through the balancer", i)
		}
	}
	// Drain them, so the failover below starts from one todo.
	for _, a := range agents {
		for {
			c := call[claimNext](t, a, "claim_next", nil)
			if c.Empty {
				break
			}
			call[todo](t, a, "complete", map[string]any{"id": c.Todo.ID})
		}
	}
	for _, id := range rung {
		if e.state(id) != "done" {
			t.Fatalf("todo %s is %s", id, e.state(id))
		}
	}
	id := e.push(ep, "inbox", "claimed before the failover")

	// Agent 0 claims the todo, then its replica stops mid-session.
	claim := call[claimNext](t, agents[0], "claim_next", map[string]any{"require_fence": true})
	if claim.Empty || claim.Todo.ID != id {
		t.Fatalf("claim_next: %+v", claim)
	}
	var pushed []string
	for i := range 6 {
		pushed = append(pushed, e.push(ep, "inbox", fmt.Sprintf("work %d", i)))
	}
	victim := 0
	if sessionsOn(r2) > 0 && agents[0].Session.ID() != "" && onReplica(t, r2, ep, agents[0]) {
		victim = 1
	}
	start := time.Now()
	if code := terms[victim](); code != 0 {
		t.Fatalf("replica %d exit status %d", victim+1, code)
	}
	t.Logf("stopped replica %d (agent 0's) in %v", victim+1, time.Since(start))
	survivor := replicas[1-victim]

	// Agent 0's session is gone with its replica: the next call fails, the agent initializes
	// again through the balancer (which now only has the survivor) and finishes its todo with
	// the lease token it kept.
	if _, err := agents[0].Call(ctxT(t), "list_todos", map[string]any{}); err == nil {
		t.Fatal("a call on the stopped replica's session succeeded")
	}
	var again *agentclient.Client
	eventually(t, 15*time.Second, "re-initialize through the balancer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := agentclient.Connect(ctx, lbIn.url(ep), ep.Cred, nil)
		if err != nil {
			return false
		}
		again = c
		return true
	})
	t.Cleanup(func() { _ = again.Close() })
	t.Logf("agent 0 re-initialized %v after the stop", time.Since(start))
	if got := call[todo](t, again, "complete", map[string]any{"id": id, "lease_token": claim.LeaseToken}); got.State != "done" {
		t.Fatalf("complete after failover: %+v", got)
	}
	// The survivor's sessions never noticed.
	if n := sessionsOn(survivor); n < 2 {
		t.Fatalf("survivor has %v sessions, want its own plus the new one", n)
	}
	// Drain through the new session and the survivor's old ones: every todo is done once.
	done := map[string]bool{}
	workers := []*agentclient.Client{again}
	for _, a := range agents[1:] {
		if onReplica(t, survivor, ep, a) {
			workers = append(workers, a)
		}
	}
	for i := 0; len(done) < len(pushed); i++ {
		w := workers[i%len(workers)]
		c := call[claimNext](t, w, "claim_next", nil)
		if c.Empty {
			t.Fatalf("queue empty with %d of %d done", len(done), len(pushed))
		}
		call[todo](t, w, "complete", map[string]any{"id": c.Todo.ID})
		done[c.Todo.ID] = true
	}
	for _, p := range pushed {
		if !done[p] || e.state(p) != "done" {
			t.Errorf("todo %s lost (state %s)", p, e.state(p))
		}
	}
	if e.state(id) != "done" {
		t.Errorf("the todo claimed before the stop is %s", e.state(id))
	}
}

// onReplica reports whether the client's session lives in that replica: a request with its
// session id straight to the replica (bypassing the balancer) is known there.
func onReplica(t *testing.T, in *instance, ep endpoint, c *agentclient.Client) bool {
	t.Helper()
	body := []byte(`{"jsonrpc":"2.0","id":99,"method":"ping"}`)
	resp := rawRequest(t, http.MethodPost, in.url(ep), ep.Cred, body, map[string]string{
		"Mcp-Session-Id": c.Session.ID(), "Accept": "application/json, text/event-stream",
		"Content-Type": "application/json", "Mcp-Protocol-Version": "2025-06-18",
	})
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
