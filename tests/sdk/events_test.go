package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP Events methods through go-sdk v1.8.0 as released: a client declares them with
// AddSendingCustomMethod and calls them with CallCustomMethod (no client patch).
type eventsParams struct {
	mcp.ParamsBase
	Name      string         `json:"name,omitempty"`
	Arguments map[string]any `json:"arguments,omitempty"`
	Cursor    *string        `json:"cursor"`
}

type pollResult struct {
	mcp.ResultBase
	Events []struct {
		EventID string         `json:"eventId"`
		Data    map[string]any `json:"data"`
	} `json:"events"`
	Cursor string `json:"cursor"`
}

type listResult struct {
	mcp.ResultBase
	Events []struct {
		Name string `json:"name"`
	} `json:"events"`
}

func TestReleasedClientPollsEvents(t *testing.T) {
	e := newEnv(t)
	r := e.serve()
	ep := e.vend("poller", []string{"inbox"})
	client := mcp.NewClient(&mcp.Implementation{Name: "events-poller", Version: "1"}, nil)
	if err := mcp.AddSendingCustomMethod[*eventsParams, *listResult](client, "events/list"); err != nil {
		t.Fatal(err)
	}
	if err := mcp.AddSendingCustomMethod[*eventsParams, *pollResult](client, "events/poll"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := &recorder{cred: ep.Cred}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.base + "/mcp/" + ep.Slug, HTTPClient: &http.Client{Transport: rec}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list, err := mcp.CallCustomMethod[*eventsParams, *listResult](ctx, cs, "events/list", &eventsParams{})
	if err != nil || len(list.Events) != 2 {
		t.Fatalf("events/list: %+v %v", list, err)
	}
	start, err := mcp.CallCustomMethod[*eventsParams, *pollResult](ctx, cs, "events/poll", &eventsParams{Name: "todo.claimable"})
	if err != nil || start.Cursor == "" {
		t.Fatalf("poll: %+v %v", start, err)
	}
	id := e.push(ep, "inbox", "polled by the released client")
	eventually(t, 20*time.Second, "the todo in a poll", func() bool {
		got, err := mcp.CallCustomMethod[*eventsParams, *pollResult](ctx, cs, "events/poll", &eventsParams{Name: "todo.claimable", Cursor: &start.Cursor})
		return err == nil && len(got.Events) == 1 && got.Events[0].Data["todo"].(map[string]any)["id"] == id
	})
}

// A replica killed with SIGKILL in the middle of a webhook POST (the outbox row taken, its
// outcome never recorded) loses no event: the other replica sends it when the row's lease
// (30 s) runs out, with the same webhook-id.
func TestEventsSurviveKill9(t *testing.T) {
	t.Setenv("SWITCHBOARD_EVENTS_ALLOW_PRIVATE_CALLBACKS", "1")
	e := newEnv(t)
	a := e.serve()
	ep := e.vend("killed", []string{"inbox"})
	var mu sync.Mutex
	var ids []string
	first := make(chan struct{})
	var once sync.Once
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var v map[string]any
		_ = json.Unmarshal(body, &v)
		if v["type"] == "verification" {
			_ = json.NewEncoder(w).Encode(map[string]any{"challenge": v["challenge"]})
			return
		}
		hung := false
		once.Do(func() { hung = true })
		if hung { // the first event POST: replica a dies while it waits
			close(first)
			<-req.Context().Done()
			return
		}
		mu.Lock()
		ids = append(ids, req.Header.Get("webhook-id"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()

	secret := "whsec_" + strings.Repeat("QUJD", 8)
	body := `{"jsonrpc":"2.0","id":1,"method":"events/subscribe","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"k","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}},` +
		`"name":"todo.claimable","delivery":{"mode":"webhook","url":"` + hook.URL + `/h","secret":"` + secret + `"}}}`
	req, _ := http.NewRequest(http.MethodPost, a.base+"/mcp/"+ep.Slug, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+ep.Cred)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "events/subscribe")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), `"sub_`) {
		t.Fatalf("subscribe: %s", raw)
	}
	id := e.push(ep, "inbox", "in flight when the server dies")
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the event POST never started")
	}
	_ = a.cmd.Process.Kill() // SIGKILL: no shutdown, the row stays taken
	<-a.exited
	e.serve()
	eventually(t, 60*time.Second, "the event from the other replica", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ids) == 1
	})
	if ids[0] != "todo_"+id+"_0" {
		t.Fatalf("webhook-id %s, want todo_%s_0", ids[0], id)
	}
}

// streamResult is the final frame of an events/stream (the SEP's StreamEventsResult).
type streamResult struct {
	mcp.ResultBase
}

// wireTap is a client's own HTTP transport that reads the notifications/events/* messages on
// the SSE answers as they pass. The released client has no way to hand a custom notification to
// the application: ClientSession.receivingMethodInfos is the fixed clientMethodInfos
// (client.go), and handleReceive checks an incoming message against it (checkRequest,
// shared.go) before any receiving middleware runs, so notifications/events/event is dropped
// there. The wire is where an application using v1.8.0 as released can see it.
type wireTap struct {
	next http.RoundTripper
	msgs chan map[string]any
}

func (w *wireTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(req)
	if err == nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &tapBody{ReadCloser: resp.Body, msgs: w.msgs}
	}
	return resp, err
}

type tapBody struct {
	io.ReadCloser
	msgs chan map[string]any
	line []byte
}

func (b *tapBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for _, c := range p[:n] {
		if c != '\n' {
			b.line = append(b.line, c)
			continue
		}
		if data, ok := strings.CutPrefix(strings.TrimSpace(string(b.line)), "data:"); ok {
			var m map[string]any
			if json.Unmarshal([]byte(data), &m) == nil && strings.HasPrefix(fmt.Sprint(m["method"]), "notifications/events/") {
				select {
				case b.msgs <- m:
				default: // the test reads a few; never block the client
				}
			}
		}
		b.line = b.line[:0]
	}
	return n, err
}

// The must-show for push with the released client: go-sdk v1.8.0 opens a 2026
// events/stream on replica a with CallCustomMethod; a webhook delivery reaches replica b; the
// notifications/events/event for it arrives on a's stream. Revoking the endpoint ends the
// stream: the client's CallCustomMethod returns the final result (the SEP's
// StreamEventsResult, with the subscription id), which the client itself does receive.
func TestReleasedClientStreamsEventsAcrossReplicas(t *testing.T) {
	e := newEnv(t)
	a, b := e.serve(), e.serve()
	ep := e.vend("streamer", []string{"inbox"})
	if _, err := e.pool.Exec(context.Background(),
		`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{generic}', webhook_queues = '{inbox}' WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	token := "tok_" + strings.Repeat(ep.ID[:8], 5)
	if _, err := e.pool.Exec(context.Background(), `SELECT switchboard.webhook_create($1, 'generic', 'inbox', $2, NULL)`, ep.ID, token); err != nil {
		t.Fatal(err)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "events-streamer", Version: "1"}, nil)
	if err := mcp.AddSendingCustomMethod[*eventsParams, *streamResult](client, "events/stream"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tap := &wireTap{next: &recorder{cred: ep.Cred}, msgs: make(chan map[string]any, 100)}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.base + "/mcp/" + ep.Slug, HTTPClient: &http.Client{Transport: tap}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	type ended struct {
		res *streamResult
		err error
	}
	done := make(chan ended, 1)
	go func() {
		res, err := mcp.CallCustomMethod[*eventsParams, *streamResult](ctx, cs, "events/stream", &eventsParams{Name: "webhook.delivery"})
		done <- ended{res, err}
	}()
	next := func(method string) map[string]any {
		t.Helper()
		pick := func(m map[string]any) (map[string]any, bool) {
			params, _ := m["params"].(map[string]any)
			return params, m["method"] == method
		}
		for {
			select {
			case m := <-tap.msgs:
				if p, ok := pick(m); ok {
					return p
				}
			case r := <-done:
				done <- r // for the check at the end; what the tap already read comes first
				for len(tap.msgs) > 0 {
					if p, ok := pick(<-tap.msgs); ok {
						return p
					}
				}
				t.Fatalf("the stream ended waiting for %s: %+v %v", method, r.res, r.err)
			case <-time.After(20 * time.Second):
				t.Fatalf("no %s on the stream", method)
			}
		}
	}
	active := next("notifications/events/active")
	if active["cursor"] == nil {
		t.Fatalf("active: %v", active)
	}

	req, _ := http.NewRequest(http.MethodPost, b.base+"/webhooks/w/"+token, strings.NewReader(`{"hello":"released client"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Delivery-Id", "sdk-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("delivery to replica b: %d", resp.StatusCode)
	}
	ev := next("notifications/events/event")
	data, _ := ev["data"].(map[string]any)
	todos, _ := data["todo_ids"].([]any)
	meta, _ := ev["_meta"].(map[string]any)
	if ev["name"] != "webhook.delivery" || !strings.HasSuffix(fmt.Sprint(data["delivery_id"]), "sdk-1") || len(todos) != 1 ||
		ev["cursor"] == nil || meta["io.modelcontextprotocol/subscriptionId"] == nil {
		t.Fatalf("pushed event: %v", ev)
	}

	if _, err := e.pool.Exec(context.Background(), `SELECT switchboard.endpoint_revoke($1)`, ep.ID); err != nil {
		t.Fatal(err)
	}
	if term := next("notifications/events/terminated"); term["error"] == nil {
		t.Fatalf("terminated: %v", term)
	}
	select {
	case r := <-done:
		if r.err != nil || r.res.Meta["io.modelcontextprotocol/subscriptionId"] == nil {
			t.Fatalf("the stream's final result: %+v %v", r.res, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("CallCustomMethod did not return after the revocation")
	}
}
