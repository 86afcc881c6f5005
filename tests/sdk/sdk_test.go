package sdk

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/tests/testproc"
)

// The released go-sdk client against one server, on 2026-07-28 (its default) and on
// 2025-11-25: the negotiated version, no Mcp-Session-Id on 2026, tools/list is the allowlist
// with a positive ttlMs, a drain, and resources/updated within 1 s of a push on a subscribed
// queue.
func TestReleasedClient(t *testing.T) {
	e := newEnv(t)
	r := e.serve()
	for _, tc := range []struct{ name, ask, want string }{
		{"2026-07-28", "", "2026-07-28"},
		{"2025-11-25", "2025-11-25", "2025-11-25"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := e.vend("sdk-"+tc.name, []string{"inbox", "other"})
			url := r.base + "/mcp/" + ep.Slug
			updated := make(chan string, 16)
			cs, rec := connect(t, url, ep.Cred, tc.ask, &mcp.ClientOptions{
				ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
					updated <- req.Params.URI
				},
			})
			if got := cs.InitializeResult().ProtocolVersion; got != tc.want {
				t.Fatalf("negotiated %q, want %q", got, tc.want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range tools.Tools {
				names = append(names, tl.Name)
			}
			if !slices.Contains(names, "claim_next") || !slices.Contains(names, "complete") {
				t.Fatalf("tools/list: %v", names)
			}
			if tc.want == "2026-07-28" && tools.TTLMs <= 0 {
				t.Fatalf("tools/list ttlMs %d", tools.TTLMs)
			}
			// Every tool has a title and its hints (the booleans readOnlyHint and idempotentHint
			// decode to false when absent: tests/ts checks the wire and docs/clients.md).
			if len(tools.Tools) != 24 {
				t.Fatalf("tools/list: %d tools, want the 24 verbs", len(tools.Tools))
			}
			for _, tl := range tools.Tools {
				if a := tl.Annotations; tl.Title == "" || a == nil || a.Title != tl.Title || a.DestructiveHint == nil || a.OpenWorldHint == nil {
					t.Errorf("%s: title %q, annotations %+v", tl.Name, tl.Title, tl.Annotations)
				} else if tl.Name == "list_todos" && !a.ReadOnlyHint || tl.Name == "delete_webhook" && !*a.DestructiveHint ||
					tl.Name == "heartbeat" && !a.IdempotentHint || *a.OpenWorldHint {
					t.Errorf("%s: hints %+v", tl.Name, *a)
				}
			}
			// The instructions (from server/discover on 2026-07-28, initialize on 2025) name the loop.
			if in := cs.InitializeResult().Instructions; !strings.Contains(in, "claim_next {wait_seconds: 50}") {
				t.Errorf("instructions %q", in)
			}

			// Resources: one per granted queue; subscribe to inbox.
			res, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			uri := ""
			for _, rs := range res.Resources {
				if rs.Name == "inbox" {
					uri = rs.URI
				}
			}
			if len(res.Resources) != 2 || uri == "" {
				t.Fatalf("resources/list: %+v", res.Resources)
			}
			acks := rec.acked()
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			if tc.want == "2026-07-28" { // the subscription travels on a listen stream opened in the background
				eventually(t, 10*time.Second, "the listen stream's acknowledgement", func() bool { return rec.acked() > acks })
			}
			start := time.Now()
			e.push(ep, "inbox", "ring")
			select {
			case got := <-updated:
				if got != uri {
					t.Fatalf("resources/updated for %q, want %q", got, uri)
				}
				t.Logf("%s: resources/updated %v after the push", tc.name, time.Since(start))
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no resources/updated within 10 s of the push", tc.name)
			}
			read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
			if err != nil || len(read.Contents) != 1 || !strings.Contains(read.Contents[0].Text, `"claimable": 1`) {
				t.Fatalf("resources/read: %v %+v", err, read)
			}

			// A drain: ten more, claimed and completed one by one.
			for i := range 10 {
				e.push(ep, "inbox", fmt.Sprintf("work %d", i))
			}
			done := 0
			for {
				var c claimResult
				if err := callJSON(ctx, cs, "claim_next", map[string]any{}, &c); err != nil {
					t.Fatal(err)
				}
				if c.Empty {
					break
				}
				var out map[string]any
				if err := callJSON(ctx, cs, "complete", map[string]any{"id": c.Todo.ID}, &out); err != nil {
					t.Fatal(err)
				}
				done++
			}
			if done != 11 || e.count(`SELECT count(*) FROM switchboard.todos WHERE endpoint_id = $1 AND state <> 'done'`, ep.ID) != 0 {
				t.Fatalf("drained %d of 11", done)
			}

			// claim_next {wait_seconds} waits for work on both protocols.
			go func() {
				time.Sleep(300 * time.Millisecond)
				e.push(ep, "inbox", "late")
			}()
			var c claimResult
			start = time.Now()
			if err := callJSON(ctx, cs, "claim_next", map[string]any{"wait_seconds": 10}, &c); err != nil || c.Empty {
				t.Fatalf("claim_next wait: %v %+v", err, c)
			}
			if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
				t.Fatalf("claim_next wait answered after %v", d)
			}
			var out map[string]any
			if err := callJSON(ctx, cs, "complete", map[string]any{"id": c.Todo.ID}, &out); err != nil {
				t.Fatal(err)
			}

			rec.mu.Lock()
			defer rec.mu.Unlock()
			if tc.want == "2026-07-28" {
				if len(rec.sessionID) != 0 {
					t.Fatalf("Mcp-Session-Id on a 2026-07-28 answer: %v", rec.sessionID)
				}
				if rec.versions["2025-11-25"] || rec.versions[""] {
					t.Fatalf("request versions %v", rec.versions)
				}
			} else if len(rec.sessionID) == 0 {
				t.Fatal("no session on 2025-11-25")
			}
		})
	}
}

// roundRobin is HAProxy in plain round robin over the replicas: no stickiness, no shared
// session store. X-Replica names the replica that answered.
const roundRobin = `
global
    maxconn 1024
defaults
    mode http
    timeout connect 2s
    timeout client 1m
    timeout server 1m
    option redispatch
    retries 2
    retry-on conn-failure empty-response response-timeout
frontend switchboard
    bind %s
    default_backend replicas
backend replicas
    balance roundrobin
    http-response set-header X-Replica %%s
    option httpchk GET /readyz
    default-server check inter 200ms fall 1 rise 2
    server r1 %s
    server r2 %s
`

// Two replicas behind plain round-robin HAProxy: a go-sdk v1.8.0 client on 2026-07-28 drains
// 200 todos with consecutive requests on different replicas, and one replica is killed
// mid-drain. Nothing is lost, doubled or refused; the requests in flight on the killed
// replica are retried on the other.
func TestRoundRobinDrain(t *testing.T) {
	testproc.HAProxy(t) // skip early when it is missing
	e := newEnv(t)
	r1, r2 := e.serve(), e.serve()
	front := freeAddr(t)
	testproc.RunHAProxy(t, fmt.Sprintf(roundRobin, front,
		strings.TrimPrefix(r1.base, "http://"), strings.TrimPrefix(r2.base, "http://")))

	ep := e.vend("rr", []string{"inbox"})
	const total = 200
	for i := range total {
		e.push(ep, "inbox", fmt.Sprintf("todo %d", i))
	}
	var cs *mcp.ClientSession
	var rec *recorder
	eventually(t, 15*time.Second, "haproxy up", func() bool {
		resp, err := http.Get("http://" + front + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	cs, rec = connect(t, "http://"+front+"/mcp/"+ep.Slug, ep.Cred, "", nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// retry runs one call again when its replica died under it (the client sees a transport
	// error or a 5xx from the balancer); a tool error is an answer and fails the test.
	retried := 0
	retry := func(name string, args map[string]any, out any) {
		for attempt := 0; ; attempt++ {
			err := callJSON(ctx, cs, name, args, out)
			if err == nil {
				return
			}
			if strings.Contains(err.Error(), "tool error") || attempt == 5 {
				t.Fatalf("%s: %v", name, err)
			}
			retried++
			t.Logf("%s retried: %v", name, err)
			time.Sleep(100 * time.Millisecond)
		}
	}
	completed := map[string]int{}
	killed := false
	for {
		var c claimResult
		retry("claim_next", map[string]any{"lease_ttl_seconds": 2}, &c)
		if c.Empty {
			// Empty: done, unless a todo claimed through the killed replica still waits for
			// its lease to end.
			if e.count(`SELECT count(*) FROM switchboard.todos WHERE endpoint_id = $1 AND state <> 'done'`, ep.ID) == 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var res map[string]any
		err := callJSON(ctx, cs, "complete", map[string]any{"id": c.Todo.ID}, &res)
		if err != nil && !strings.Contains(err.Error(), "tool error") {
			// Lost in flight: finish it again (a conflict means the first attempt landed).
			retried++
			err = callJSON(ctx, cs, "complete", map[string]any{"id": c.Todo.ID}, &res)
		}
		if err != nil && !strings.Contains(err.Error(), "conflict") {
			t.Fatalf("complete %s: %v", c.Todo.ID, err)
		}
		completed[c.Todo.ID]++
		if len(completed) == total/2 && !killed {
			killed = true
			_ = r1.cmd.Process.Kill()
			t.Logf("killed replica 1 after %d todos", len(completed))
		}
	}
	if n := e.count(`SELECT count(*) FROM switchboard.todos WHERE endpoint_id = $1 AND state = 'done'`, ep.ID); n != total {
		t.Fatalf("%d of %d done", n, total)
	}
	doubled := 0
	for _, n := range completed {
		if n > 1 {
			doubled++
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	alternations, on := 0, map[string]int{}
	for i, r := range rec.replicas {
		on[r]++
		if i > 0 && r != rec.replicas[i-1] {
			alternations++
		}
	}
	t.Logf("%d todos done, %d claimed twice (lease ran out after the kill), %d calls retried; %d answers: %v, %d consecutive pairs on different replicas",
		total, doubled, retried, len(rec.replicas), on, alternations)
	if on["r1"] == 0 || on["r2"] == 0 || alternations < total/2 {
		t.Fatalf("requests did not alternate between the replicas: %v, %d alternations", on, alternations)
	}
	if len(rec.sessionID) != 0 {
		t.Fatalf("Mcp-Session-Id on an answer: %v", rec.sessionID[:1])
	}
}
