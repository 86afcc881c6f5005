package server_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"switchboard/server"
	"switchboard/server/mcpapi"
	"switchboard/server/store"
	"switchboard/tests/e2e/agentclient"
	"switchboard/tests/testdb"
)

// Graceful shutdown ends everything the server started: HTTP connections, MCP sessions and
// their streams, the doorbell listener and its workers, the reaper; then the pool closes and no
// goroutine is left behind.
func TestShutdownLeavesNoGoroutine(t *testing.T) {
	dsn := testdb.New(t)
	baseline := runtime.NumGoroutine()

	ctx := context.Background()
	pool, err := store.Open(ctx, dsn, 4) // the server's: runs as switchboard_runtime
	if err != nil {
		t.Fatal(err)
	}
	fixtures, err := store.OpenAdmin(ctx, dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.ReaperInterval = 50 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = ln.Addr().String()
	srv, err := server.New(cfg, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	<-srv.Doorbell().Listening()

	// Some traffic: a session with a stream, calls, a ring, an in-flight call at shutdown.
	var raw []byte
	if _, err := fixtures.Exec(ctx, `INSERT INTO switchboard.humans (name) VALUES ('ann')`); err != nil {
		t.Fatal(err)
	}
	if err := fixtures.QueryRow(ctx, `SELECT switchboard.endpoint_vend('ann', 'a', $1, 'sbk_', ARRAY['inbox'])`,
		store.CredentialHash("sbk_leak")).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var ep struct {
		ID   string `json:"endpoint_id"`
		Slug string `json:"slug"`
	}
	_ = json.Unmarshal(raw, &ep)
	tr := &http.Transport{}
	c, err := agentclient.Connect(ctx, srv.BaseURL()+"/mcp/"+ep.Slug, "sbk_leak", &agentclient.Options{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	<-c.StreamReady()
	if _, err := fixtures.Exec(ctx, `SELECT switchboard.create_todo($1, 'inbox', 'x')`, ep.ID); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.WaitNotification(wctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, "claim_next", nil); err != nil {
		t.Fatal(err)
	}

	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown hung")
	}
	pool.Close()
	fixtures.Close()
	_ = c.Close()
	tr.CloseIdleConnections()

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), baseline, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConfigFromEnv(t *testing.T) {
	for k, v := range map[string]string{
		"SWITCHBOARD_ADDR": "0.0.0.0:9000", "SWITCHBOARD_REAPER_INTERVAL": "0",
		"SWITCHBOARD_TOOL_RATE": "5/s", "SWITCHBOARD_TOOL_BURST": "7",
		"SWITCHBOARD_WEBHOOK_RATE": "3/m", "SWITCHBOARD_WEBHOOK_BURST": "2",
		"SWITCHBOARD_INIT_RATE": "4/s", "SWITCHBOARD_INIT_BURST": "9",
		"SWITCHBOARD_EVENTS_RATE": "6/m", "SWITCHBOARD_EVENTS_BURST": "8",
		"SWITCHBOARD_MAX_SESSIONS_PER_ENDPOINT": "3", "SWITCHBOARD_LOG_LEVEL": "debug",
	} {
		t.Setenv(k, v)
	}
	t.Setenv("SWITCHBOARD_BASE_URL", "")
	cfg, err := server.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	want := mcpapi.Limits{ToolRate: 5, ToolBurst: 7, WebhookRate: 3.0 / 60, WebhookBurst: 2, InitRate: 4, InitBurst: 9,
		EventsRate: 6.0 / 60, EventsBurst: 8}
	if cfg.Addr != "0.0.0.0:9000" || cfg.ReaperInterval != 0 || cfg.Limits != want || cfg.LogLevel.String() != "DEBUG" ||
		cfg.MaxSessionsPerEndpoint != 3 {
		t.Fatalf("%+v", cfg)
	}
	t.Setenv("SWITCHBOARD_REAPER_INTERVAL", "250ms")
	t.Setenv("SWITCHBOARD_TOOL_RATE", "fast")
	if _, err := server.ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "SWITCHBOARD_TOOL_RATE") {
		t.Fatalf("bad rate accepted: %v", err)
	}
	os.Unsetenv("SWITCHBOARD_TOOL_RATE")
	d := server.DefaultConfig()
	if d.Addr != "127.0.0.1:8080" || d.ReaperInterval != 30*time.Second || d.Limits != mcpapi.DefaultLimits() ||
		d.MaxSessionsPerEndpoint != 64 {
		t.Fatalf("defaults %+v", d)
	}
}
