package e2e

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"switchboard/tests/e2e/agentclient"
)

// A database that drops every session under the server (a shutdown or restart, a DBA's
// pg_terminate_backend) costs at most the call that meets it first: that call answers the
// tool error internal, with nothing more, and changes nothing; the pool then drops its other
// dead connections at once, so the calls after it work (store.Open).
func TestDroppedDatabaseConnections(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	ids := []string{e.push(ep, "inbox", "one"), e.push(ep, "inbox", "two"), e.push(ep, "inbox", "three")}
	openConnections(t, e, c)
	dropSessions(e)

	failed := 0
	for _, id := range ids {
		_, err := c.Call(ctxT(t), "claim", map[string]any{"id": id})
		var te *agentclient.ToolError
		switch {
		case err == nil:
		case errors.As(err, &te) && te.Code == "internal" && te.Message == "internal error":
			failed++
			if s := e.state(id); s != "pending" {
				t.Fatalf("the claim that met the loss left todo %s %s", id, s)
			}
			if _, err := c.Call(ctxT(t), "claim", map[string]any{"id": id}); err != nil {
				t.Fatalf("claim again after the loss: %v", err)
			}
		default:
			t.Fatalf("claim after the loss: %v", err)
		}
		if s := e.state(id); s != "claimed" {
			t.Fatalf("todo %s is %s, want claimed", id, s)
		}
	}
	if failed > 1 {
		t.Fatalf("%d calls failed after the loss; only the first may", failed)
	}
}

// The webhook receiver shares the pool: a delivery that meets the loss answers 503 with
// Retry-After (an outage, not a bug) and stores nothing, so the sender's retry of the same
// delivery makes the one todo.
func TestDroppedDatabaseConnectionsWebhook(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	e.exec(`UPDATE switchboard.endpoints SET webhook_max = 1, webhook_sources = '{generic}', webhook_queues = '{inbox}' WHERE id = $1`, ep.ID)
	token := "tok_" + strings.Repeat(ep.ID[:8], 5) // 44 characters, unique to this endpoint
	e.exec(`SELECT switchboard.webhook_create($1, 'generic', 'inbox', $2, NULL)`, ep.ID, token)
	openConnections(t, e, c)
	dropSessions(e)

	retryAfter := ""
	deliver := func() int {
		req, _ := http.NewRequest(http.MethodPost, e.base+"/webhooks/w/"+token, bytes.NewReader([]byte(`{"n":1}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Delivery-Id", "across-the-loss")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		retryAfter = resp.Header.Get("Retry-After")
		return resp.StatusCode
	}
	todos := func() (n int) {
		_ = e.pool.QueryRow(ctxT(t), `SELECT count(*) FROM switchboard.todos WHERE endpoint_id = $1`, ep.ID).Scan(&n)
		return n
	}
	first := deliver()
	switch {
	case first == http.StatusServiceUnavailable && todos() == 0 && retryAfter != "":
	case first == http.StatusAccepted:
	default:
		t.Fatalf("delivery after the loss: %d with %d todos", first, todos())
	}
	if again := deliver(); again != http.StatusAccepted || todos() != 1 {
		t.Fatalf("the retried delivery: %d with %d todos, want 202 and one todo", again, todos())
	}
}

// openConnections makes concurrent calls so that several of the server pool's connections
// are open.
func openConnections(t *testing.T, e *env, c *agentclient.Client) {
	t.Helper()
	errs := make(chan error, 8)
	for range 8 {
		go func() { _, err := c.Call(ctxT(t), "list_todos", map[string]any{}); errs <- err }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var open int
	if err := e.pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity
	     WHERE datname = current_database() AND application_name = ''`).Scan(&open); err != nil || open < 3 {
		t.Fatalf("want several pooled connections before the loss, have %d (%v)", open, err)
	}
}

// dropSessions terminates every session of the test database but the doorbell's LISTEN (its
// own loss is TestDoorbellSurvivesListenerLoss).
func dropSessions(e *env) {
	e.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	         WHERE datname = current_database() AND pid <> pg_backend_pid()
	           AND application_name <> 'switchboard-doorbell'`)
	e.pool.Reset() // the test's own pool lost its connections too
}
