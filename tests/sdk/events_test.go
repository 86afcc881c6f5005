package sdk

import (
	"context"
	"encoding/json"
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
