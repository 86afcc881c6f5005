package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"switchboard/server"
	"switchboard/server/tool"
	"switchboard/tests/e2e/agentclient"
)

type todo struct {
	ID           string          `json:"id"`
	Queue        string          `json:"queue"`
	State        string          `json:"state"`
	Attempt      int             `json:"attempt"`
	MaxAttempts  int             `json:"max_attempts"`
	Owner        *string         `json:"owner"`
	LeaseExpires *string         `json:"lease_expires_at"`
	NextRetryAt  *string         `json:"next_retry_at"`
	DeadLetter   bool            `json:"dead_letter"`
	LeaseToken   string          `json:"lease_token"`
	Result       json.RawMessage `json:"result"`
	Next         *claimNext      `json:"next"`
}

type claimNext struct {
	Empty      bool   `json:"empty"`
	Todo       *todo  `json:"todo"`
	LeaseToken string `json:"lease_token"`
	Error      string `json:"error"`
}

func call[T any](t *testing.T, c *agentclient.Client, verb string, args any) T {
	t.Helper()
	var out T
	if err := c.CallInto(ctxT(t), verb, args, &out); err != nil {
		t.Fatalf("%s: %v", verb, err)
	}
	return out
}

func wantCode(t *testing.T, c *agentclient.Client, code, verb string, args any) string {
	t.Helper()
	res, err := c.CallRaw(ctxT(t), verb, args)
	if err != nil {
		t.Fatalf("%s: not a tool error but %v", verb, err)
	}
	text := ""
	if len(res.Content) == 1 {
		if b, err := json.Marshal(res.Content[0]); err == nil {
			var tc struct{ Text string }
			_ = json.Unmarshal(b, &tc)
			text = tc.Text
		}
	}
	if !res.IsError || !strings.HasPrefix(text, code+": ") {
		t.Fatalf("%s: want %s, got isError=%v %q", verb, code, res.IsError, text)
	}
	return text
}

func TestToolsListIsTheAllowlist(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	names := func(c *agentclient.Client) []string {
		res, err := c.Session.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tl := range res.Tools {
			out = append(out, tl.Name)
			if tl.InputSchema == nil || tl.OutputSchema == nil {
				t.Errorf("%s: missing schema", tl.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	some := e.vend("ann", []string{"inbox"}, []string{"list_todos", "claim_next", "complete"})
	if got, want := names(e.connect(t, some, nil)), []string{"claim_next", "complete", "get_todo", "list_todos"}; !slices.Equal(got, want) {
		t.Fatalf("tools/list %v, want %v (list_todos implies get_todo)", got, want)
	}
	all := e.vend("bob", []string{"inbox"}, nil)
	got := names(e.connect(t, all, nil))
	todoVerbs := []string{"claim", "claim_next", "complete", "fail", "get_todo", "heartbeat", "list_todos", "release"}
	for _, v := range todoVerbs {
		if !slices.Contains(got, v) {
			t.Fatalf("tools/list %v lacks %s", got, v)
		}
	}
	for _, v := range got {
		if !slices.Contains(tool.Vocabulary, v) {
			t.Fatalf("tools/list offers %s, not a verb", v)
		}
	}

	init := e.connect(t, some, nil).Session.InitializeResult()
	if _, ok := init.Capabilities.Experimental["claude/channel"]; !ok || init.Capabilities.Tools == nil || !init.Capabilities.Tools.ListChanged {
		t.Fatalf("capabilities %+v", init.Capabilities)
	}
	// The drain loop, the waiting limit and the error codes.
	for _, want := range []string{"claim_next {wait_seconds: 50}", "next: {wait_seconds: 50}", "claim_wait_max_seconds",
		"conflict", "rate_limited", "invalid_argument", "internal"} {
		if !strings.Contains(init.Instructions, want) {
			t.Errorf("instructions lack %q: %q", want, init.Instructions)
		}
	}
}

func TestVerbOutsideAllowlistIsForbidden(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, []string{"claim", "list_todos"})
	c := e.connect(t, ep, nil)
	id := e.push(ep, "inbox", "x")
	call[todo](t, c, "claim", map[string]any{"id": id})
	wantCode(t, c, "forbidden", "complete", map[string]any{"id": id})
	wantCode(t, c, "forbidden", "create_webhook", map[string]any{"source_type": "github", "target_queue": "inbox"})
	if s := e.state(id); s != "claimed" {
		t.Fatalf("todo %s after a forbidden complete", s)
	}
	// A name outside the vocabulary is a protocol error, not a tool error.
	if _, err := c.CallRaw(ctxT(t), "no_such_verb", nil); err == nil {
		t.Fatal("unknown tool accepted")
	}
}

func TestTodoOutsideGrantedQueues(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	other := e.push(ep, "elsewhere", "not granted") // its own todo, in a queue outside the grant
	wantCode(t, c, "forbidden", "claim", map[string]any{"id": other})
	wantCode(t, c, "forbidden", "get_todo", map[string]any{"id": other})
	wantCode(t, c, "forbidden", "list_todos", map[string]any{"queue": "elsewhere"})
	wantCode(t, c, "forbidden", "claim_next", map[string]any{"queue": "elsewhere"})
	if s := e.state(other); s != "pending" {
		t.Fatalf("todo %s", s)
	}
	// claim_next never picks it either.
	if got := call[claimNext](t, c, "claim_next", nil); !got.Empty {
		t.Fatalf("claim_next took %+v", got.Todo)
	}
}

func TestUnknownIDIsNotFound(t *testing.T) {
	e := newEnv(t)
	a := e.vend("ann", []string{"inbox"}, nil)
	b := e.vend("bob", []string{"inbox"}, nil)
	c := e.connect(t, a, nil)
	foreign := e.push(b, "inbox", "bob's")
	for _, id := range []string{"6a1e8a8e-3a57-4bb5-9b0e-0f3f5c2b9f11", "not-a-uuid", foreign} {
		for _, verb := range []string{"get_todo", "claim", "complete", "fail", "heartbeat", "release"} {
			msg := wantCode(t, c, "not_found", verb, map[string]any{"id": id})
			if msg != "not_found: todo not found" {
				t.Fatalf("%s %s: %q", verb, id, msg)
			}
		}
	}
	if s := e.state(foreign); s != "pending" {
		t.Fatalf("foreign todo %s", s)
	}
}

func TestClaimRaceOneWinner(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c1 := e.connect(t, ep, nil)
	c2 := e.connect(t, ep, nil)
	for round := 0; round < 10; round++ {
		id := e.push(ep, "inbox", fmt.Sprint("race ", round))
		var wg sync.WaitGroup
		codes := make([]string, 2)
		for i, c := range []*agentclient.Client{c1, c2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Call(context.Background(), "claim", map[string]any{"id": id})
				codes[i] = agentclient.CodeOf(err)
				if err == nil {
					codes[i] = "ok"
				}
			}()
		}
		wg.Wait()
		slices.Sort(codes)
		if !slices.Equal(codes, []string{"conflict", "ok"}) {
			t.Fatalf("round %d: %v", round, codes)
		}
	}
}

func TestFailRetryCycle(t *testing.T) {
	e := newEnv(t)
	e.exec(`UPDATE switchboard.settings SET value = 0.2 WHERE key = 'backoff_base_seconds'`)
	e.exec(`UPDATE switchboard.settings SET value = 2 WHERE key = 'max_attempts'`)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	id := e.push(ep, "inbox", "flaky")

	got := call[claimNext](t, c, "claim_next", nil)
	if got.Empty || got.Todo.ID != id || got.Todo.Attempt != 1 {
		t.Fatalf("first claim %+v", got)
	}
	f := call[todo](t, c, "fail", map[string]any{"id": id, "result": map[string]any{"error": "boom"}})
	if f.State != "failed" || f.NextRetryAt == nil || f.DeadLetter {
		t.Fatalf("first fail: %+v", f)
	}
	// Parked: not claimable until the window passes, then back in play.
	var again claimNext
	eventually(t, 5*time.Second, "retry window", func() bool {
		again = call[claimNext](t, c, "claim_next", nil)
		return !again.Empty
	})
	if again.Todo.ID != id || again.Todo.Attempt != 2 {
		t.Fatalf("retry claim %+v", again.Todo)
	}
	f = call[todo](t, c, "fail", map[string]any{"id": id})
	if f.State != "failed" || f.NextRetryAt != nil || !f.DeadLetter {
		t.Fatalf("last fail should dead-letter: %+v", f)
	}
	time.Sleep(300 * time.Millisecond)
	if got := call[claimNext](t, c, "claim_next", nil); !got.Empty {
		t.Fatalf("dead letter claimed again: %+v", got.Todo)
	}
}

func TestExpiredLeaseRequeuedByReaper(t *testing.T) {
	e := newEnv(t, func(c *server.Config) { c.ReaperInterval = 200 * time.Millisecond })
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	id := e.push(ep, "inbox", "crashy")
	cl := call[todo](t, c, "claim", map[string]any{"id": id, "lease_ttl_seconds": 1})
	if cl.State != "claimed" {
		t.Fatalf("claim %+v", cl)
	}
	// The agent "crashes": no more calls. The reaper alone must requeue it.
	eventually(t, 5*time.Second, "reaper requeue", func() bool { return e.state(id) == "pending" })
	var owner *string
	var attempt int
	_ = e.pool.QueryRow(context.Background(), `SELECT owner, attempt FROM switchboard.todos WHERE id = $1`, id).Scan(&owner, &attempt)
	if owner != nil || attempt != 1 {
		t.Fatalf("requeued todo owner=%v attempt=%d", owner, attempt)
	}
}

func TestHeartbeatOnlyByHolder(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	other := e.vend("bob", []string{"inbox"}, nil)
	holder := e.connect(t, ep, nil)
	rival := e.connect(t, ep, nil) // same endpoint, another worker
	stranger := e.connect(t, other, nil)
	id := e.push(ep, "inbox", "fenced")

	cl := call[todo](t, holder, "claim", map[string]any{"id": id, "require_fence": true, "lease_ttl_seconds": 60})
	if cl.LeaseToken == "" {
		t.Fatal("no lease token")
	}
	var before string
	_ = e.pool.QueryRow(context.Background(), `SELECT lease_expires_at::text FROM switchboard.todos WHERE id = $1`, id).Scan(&before)
	wantCode(t, rival, "conflict", "heartbeat", map[string]any{"id": id, "lease_ttl_seconds": 3600})
	wantCode(t, rival, "conflict", "heartbeat", map[string]any{"id": id, "lease_token": "sbl_wrong", "lease_ttl_seconds": 3600})
	wantCode(t, stranger, "not_found", "heartbeat", map[string]any{"id": id, "lease_ttl_seconds": 3600})
	wantCode(t, rival, "conflict", "complete", map[string]any{"id": id})
	var after string
	_ = e.pool.QueryRow(context.Background(), `SELECT lease_expires_at::text FROM switchboard.todos WHERE id = $1`, id).Scan(&after)
	if before != after {
		t.Fatalf("lease moved by a non-holder: %s → %s", before, after)
	}
	hb := call[todo](t, holder, "heartbeat", map[string]any{"id": id, "lease_token": cl.LeaseToken, "lease_ttl_seconds": 120})
	if hb.State != "claimed" || hb.LeaseExpires == nil || *hb.LeaseExpires == *cl.LeaseExpires {
		t.Fatalf("holder heartbeat %+v", hb)
	}
}

func TestListConfinedToGrantedQueues(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"a", "b"}, nil)
	c := e.connect(t, ep, nil)
	e.exec(`SELECT switchboard.create_todo($1, 'a', 'a' || i) FROM generate_series(1, 55) i`, ep.ID)
	e.exec(`SELECT switchboard.create_todo($1, 'b', 'b' || i) FROM generate_series(1, 5) i`, ep.ID)
	e.exec(`SELECT switchboard.create_todo($1, 'c', 'c' || i) FROM generate_series(1, 5) i`, ep.ID)

	type list struct{ Todos []todo }
	got := call[list](t, c, "list_todos", nil)
	if len(got.Todos) != 50 {
		t.Fatalf("default limit: %d todos", len(got.Todos))
	}
	got = call[list](t, c, "list_todos", map[string]any{"limit": 200})
	if len(got.Todos) != 60 {
		t.Fatalf("all granted: %d todos", len(got.Todos))
	}
	for _, td := range got.Todos {
		if td.Queue != "a" && td.Queue != "b" {
			t.Fatalf("listed a todo of queue %s", td.Queue)
		}
	}
	got = call[list](t, c, "list_todos", map[string]any{"queue": "b", "state": "pending"})
	if len(got.Todos) != 5 {
		t.Fatalf("queue b: %d", len(got.Todos))
	}
	wantCode(t, c, "forbidden", "list_todos", map[string]any{"queue": "c"})
}

func TestNextOption(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox", "other"}, nil)
	c := e.connect(t, ep, nil)
	ids := []string{e.push(ep, "inbox", "1"), e.push(ep, "inbox", "2"), e.push(ep, "inbox", "3")}

	first := call[claimNext](t, c, "claim_next", nil)
	if first.Todo.ID != ids[0] {
		t.Fatalf("first %+v", first)
	}
	// complete + next: one call finishes one todo and claims the following one.
	done := call[todo](t, c, "complete", map[string]any{"id": ids[0], "result": "ok",
		"next": map[string]any{"require_fence": true, "lease_ttl_seconds": 30}})
	if done.State != "done" || done.Next == nil || done.Next.Empty || done.Next.Todo.ID != ids[1] || done.Next.LeaseToken == "" {
		t.Fatalf("complete+next %+v next=%+v", done, done.Next)
	}
	// fail + next (with the fence of the claimed one).
	failed := call[todo](t, c, "fail", map[string]any{"id": ids[1], "lease_token": done.Next.LeaseToken, "next": map[string]any{}})
	if failed.State != "failed" || failed.Next == nil || failed.Next.Todo == nil || failed.Next.Todo.ID != ids[2] {
		t.Fatalf("fail+next %+v next=%+v", failed, failed.Next)
	}
	// release + next in a queue outside the grant: the release stands, next reports the refusal.
	rel := call[todo](t, c, "release", map[string]any{"id": ids[2], "next": map[string]any{"queue": "forbidden-q"}})
	if rel.State != "pending" || rel.Next == nil || !strings.HasPrefix(rel.Next.Error, "forbidden: ") || rel.Next.Todo != nil {
		t.Fatalf("release+bad next %+v next=%+v", rel, rel.Next)
	}
	if s := e.state(ids[2]); s != "pending" {
		t.Fatalf("released todo is %s", s)
	}
	// A refused transition claims nothing.
	wantCode(t, c, "conflict", "complete", map[string]any{"id": ids[2], "next": map[string]any{}})
	if s := e.state(ids[2]); s != "pending" {
		t.Fatalf("todo %s after refused complete+next", s)
	}
	// next on an empty queue: {empty: true}.
	c2 := call[claimNext](t, c, "claim_next", map[string]any{"queue": "inbox"})
	last := call[todo](t, c, "complete", map[string]any{"id": c2.Todo.ID, "next": map[string]any{"queue": "other"}})
	if last.Next == nil || !last.Next.Empty {
		t.Fatalf("empty next %+v", last.Next)
	}
}

func TestInvalidArgumentsAreToolErrors(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	id := e.push(ep, "inbox", "x")
	cases := []struct {
		verb string
		args any
		want string
	}{
		{"claim", map[string]any{}, `missing required argument "id"`},
		{"claim", map[string]any{"id": 5}, `argument "id" has an invalid value`},
		{"claim", map[string]any{"id": id, "trust_mode": "none"}, `unknown argument "trust_mode"`},
		{"claim", map[string]any{"id": id, "lease_ttl_seconds": 1.5}, `argument "lease_ttl_seconds" has an invalid value`},
		{"list_todos", map[string]any{"state": "sleeping"}, `argument "state" has an invalid value`},
		{"list_todos", map[string]any{"limit": "ten"}, `argument "limit" has an invalid value`},
		{"complete", map[string]any{"id": id, "next": map[string]any{"queue": 1}}, `argument "next" has an invalid value`},
		{"claim_next", map[string]any{"require_fence": "yes"}, `argument "require_fence" has an invalid value`},
	}
	for _, tc := range cases {
		msg := wantCode(t, c, "invalid_argument", tc.verb, tc.args)
		if !strings.Contains(msg, tc.want) {
			t.Errorf("%s %v: %q, want %q", tc.verb, tc.args, msg, tc.want)
		}
	}
	if s := e.state(id); s != "pending" {
		t.Fatalf("todo %s", s)
	}
	// Huge numbers are clamped, not an error.
	cl := call[todo](t, c, "claim", map[string]any{"id": id, "lease_ttl_seconds": 1e15})
	if cl.State != "claimed" {
		t.Fatalf("claim with a huge ttl: %+v", cl)
	}
}

func TestRateLimited(t *testing.T) {
	e := newEnv(t, func(c *server.Config) { c.Limits.ToolRate = 1; c.Limits.ToolBurst = 3 })
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	for i := 0; i < 3; i++ {
		call[claimNext](t, c, "claim_next", nil)
	}
	msg := wantCode(t, c, "rate_limited", "claim_next", nil)
	if !strings.Contains(msg, "retry in") {
		t.Fatalf("message %q", msg)
	}
	// The bucket is per endpoint: another endpoint is unaffected.
	other := e.connect(t, e.vend("bob", []string{"inbox"}, nil), nil)
	call[claimNext](t, other, "claim_next", nil)
}

// A call whose client goes away stops its SQL: the request's context reaches the query.
func TestClientCancelStopsSQL(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	id := e.push(ep, "inbox", "locked")
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM switchboard.todos WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%switchboard.claim(%'`).Scan(&n)
		return n
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := c.Call(cctx, "claim", map[string]any{"id": id}); done <- err }()
	eventually(t, 5*time.Second, "claim blocked on the row lock", func() bool { return waiting() == 1 })
	cancel() // the SDK client sends notifications/cancelled
	<-done
	eventually(t, 5*time.Second, "the blocked query cancelled", func() bool { return waiting() == 0 })

	// A client that just drops the HTTP request (no cancellation message) stops it too.
	body := `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"claim","arguments":{"id":"` + id + `"}}}`
	rctx, rcancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(rctx, "POST", e.url(ep), strings.NewReader(body))
	for k, v := range map[string]string{"Authorization": "Bearer " + ep.Cred, "Mcp-Session-Id": c.Session.ID(),
		"Mcp-Protocol-Version": "2025-06-18", "Content-Type": "application/json", "Accept": "application/json, text/event-stream"} {
		req.Header.Set(k, v)
	}
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, 5*time.Second, "raw claim blocked on the row lock", func() bool { return waiting() == 1 })
	rcancel()
	eventually(t, 5*time.Second, "the dropped request's query cancelled", func() bool { return waiting() == 0 })
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The session outlives its abandoned calls.
	call[todo](t, c, "claim", map[string]any{"id": id})
	if s := e.state(id); s != "claimed" {
		t.Fatalf("todo %s", s)
	}
}
