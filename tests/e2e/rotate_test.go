package e2e

import (
	"testing"
	"time"

	"switchboard/server/store"
	"switchboard/tests/e2e/agentclient"
)

// rotate swaps an endpoint's credential in place: the old one gets 401 at once and its live
// session closes; the new one works on the same slug with the same todos. With a grace the old
// one keeps working until the grace ends (expire_credentials, run by the maintenance loop).
func TestRotateCredentialClosesSessions(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"inbox"}, nil)
	id := e.push(ep, "inbox", "survives the rotation")
	old := e.connect(t, ep, nil)
	if _, err := old.Call(ctxT(t), "list_todos", nil); err != nil {
		t.Fatal(err)
	}

	rotate := func(cred, grace string) {
		t.Helper()
		var g any
		if grace != "" {
			g = grace
		}
		e.exec(`SELECT switchboard.endpoint_rotate($1, $2, $3, $4::interval)`, ep.ID, store.CredentialHash(cred), cred[:8], g)
	}
	next := ep
	next.Cred = "sbk_rotated_" + itoa(int(time.Now().UnixNano()))
	rotate(next.Cred, "")
	eventually(t, 5*time.Second, "the old credential's session closed", func() bool { return e.srv.MCP().SessionCount(ep.ID) == 0 })
	if _, err := old.Call(ctxT(t), "list_todos", nil); err == nil {
		t.Fatal("the old session still answers after the rotation")
	}
	wantUnauthenticated(t, rawRequest(t, "POST", e.url(ep), ep.Cred, []byte(initBody), mcpHeaders))
	fresh := e.connect(t, next, nil)
	if got := call[claimNext](t, fresh, "claim_next", nil); got.Empty || got.Todo.ID != id {
		t.Fatalf("claim_next with the new credential: %+v", got)
	}

	// With a grace: the old credential (now next) still opens sessions; after the grace it is
	// refused and its sessions close, while the newest credential's session stays.
	third := next
	third.Cred = "sbk_third_" + itoa(int(time.Now().UnixNano()))
	rotate(third.Cred, "10 minutes")
	if _, err := fresh.Call(ctxT(t), "list_todos", nil); err != nil {
		t.Fatalf("within the grace the old session must go on: %v", err)
	}
	graced := e.connect(t, next, nil)
	newest := e.connect(t, third, nil)
	e.exec(`UPDATE switchboard.endpoints SET old_credential_until = now() - interval '1 second' WHERE id = $1`, ep.ID)
	wantUnauthenticated(t, rawRequest(t, "POST", e.url(ep), next.Cred, []byte(initBody), mcpHeaders))
	e.exec(`SELECT switchboard.expire_credentials()`)
	eventually(t, 5*time.Second, "the graced credential's sessions closed", func() bool { return e.srv.MCP().SessionCount(ep.ID) == 1 })
	for _, c := range []*struct {
		name string
		err  error
	}{{"graced", callErr(t, graced)}, {"fresh", callErr(t, fresh)}} {
		if c.err == nil {
			t.Fatalf("the %s session (old credential) still answers after the grace", c.name)
		}
	}
	if err := callErr(t, newest); err != nil {
		t.Fatalf("the newest credential's session: %v", err)
	}
}

func callErr(t *testing.T, c *agentclient.Client) error {
	_, err := c.Call(ctxT(t), "list_todos", nil)
	return err
}
