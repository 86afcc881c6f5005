package e2e

import (
	"context"
	"testing"
	"time"

	"switchboard/tests/e2e/mcpbench"
)

// Todos pushed faster than the doorbell window (their signals coalesce) still ring, through
// the trailing re-check.
func TestDoorbellCoalescedPushesRing(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("ann", []string{"bench"}, nil)
	p50, p99, err := mcpbench.DoorbellLatency(context.Background(),
		mcpbench.Endpoint{ID: ep.ID, Slug: ep.Slug, Credential: ep.Cred, URL: e.url(ep)}, e.dsn, 30, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("coalesced pushes: p50 %v p99 %v", p50, p99)
}
