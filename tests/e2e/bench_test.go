package e2e

import (
	"context"
	"testing"
	"time"

	"switchboard/server"
	"switchboard/tests/e2e/mcpbench"
	"switchboard/tests/testdb"
)

// BenchmarkMCPCycle drives claim_next+complete over MCP against an in-process server
// (for profiling: go test -run X -bench MCPCycle -cpuprofile cpu.out ./tests/e2e).
func BenchmarkMCPCycle(b *testing.B) {
	ctx := context.Background()
	dsn := testdb.New(b)
	cfg := server.DefaultConfig()
	cfg.Limits.ToolRate, cfg.Limits.ToolBurst = 1e6, 1e6
	srv, err := mcpbench.StartInProcess(ctx, dsn, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	ep, err := mcpbench.Vend(ctx, dsn, "bench", srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	if err := mcpbench.Prefill(ctx, dsn, ep.ID, 4000); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	r, err := mcpbench.DriveMCP(ctx, ep, 4, time.Duration(b.N)*time.Millisecond, mcpbench.ClaimThenComplete, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.PerSec(), "cycles/s")
}
