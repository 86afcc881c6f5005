package e2e

import (
	"encoding/json"
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	c := e.connect(t, ep, nil)
	ctx := ctxT(t)
	id := e.push(ep, "inbox", "hello")
	n, err := c.WaitNotification(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("notification: %+v", n)
	out, err := c.Call(ctx, "claim_next", nil)
	if err != nil {
		t.Fatal(err)
	}
	var cl struct {
		Empty bool
		Todo  struct{ ID string }
	}
	_ = json.Unmarshal(out, &cl)
	if cl.Todo.ID != id {
		t.Fatalf("claim_next: %s", out)
	}
	out, err = c.Call(ctx, "complete", map[string]any{"id": id, "result": map[string]any{"ok": true}, "next": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("complete: %s", out)
	_ = time.Second
}
