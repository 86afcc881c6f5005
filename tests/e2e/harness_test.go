package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"switchboard/server"
	"switchboard/server/store"
	"switchboard/tests/e2e/agentclient"
	"switchboard/tests/testdb"
)

// env is one database with one running server (more with startServer).
type env struct {
	t    *testing.T
	dsn  string
	pool *pgxpool.Pool // fixtures and assertions
	*instance
}

// instance is one running server process's worth: its own pool, listener and doorbell.
type instance struct {
	srv  *server.Server
	base string
	stop func()
}

func newEnv(t *testing.T, tweak ...func(*server.Config)) *env {
	t.Helper()
	dsn := testdb.New(t)
	pool, err := store.OpenAdmin(context.Background(), dsn, 4) // fixtures and assertions read tables
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := &env{t: t, dsn: dsn, pool: pool}
	e.instance = e.startServer(tweak...)
	return e
}

// startServer runs another server on the same database (stopped at cleanup).
func (e *env) startServer(tweak ...func(*server.Config)) *instance {
	t := e.t
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.ReaperInterval = 0
	cfg.ShutdownTimeout = 5 * time.Second
	for _, f := range tweak {
		f(&cfg)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = ln.Addr().String()
	pool, err := store.Open(context.Background(), e.dsn, 8)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, pool, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	in := &instance{srv: srv, base: "http://" + cfg.Addr}
	stopped := false
	in.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(soon):
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Errorf("shutdown is slow; goroutines:\n%s", buf[:n])
			<-done
		}
		pool.Close()
	}
	t.Cleanup(in.stop)
	// Doorbell tests need the LISTEN connection up.
	select {
	case <-srv.Doorbell().Listening():
	case <-time.After(10 * time.Second):
		t.Fatal("doorbell listener did not come up")
	}
	return in
}

// endpoint is a vended endpoint with its credential.
type endpoint struct {
	ID, Slug, Cred string
}

func (in *instance) url(ep endpoint) string { return in.base + "/mcp/" + ep.Slug }

// vend makes an endpoint (verbs nil: all) for the human (created when new).
func (e *env) vend(human string, queues, verbs []string) endpoint {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `INSERT INTO switchboard.humans (name) VALUES ($1) ON CONFLICT DO NOTHING`, human); err != nil {
		e.t.Fatal(err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	cred := "sbk_" + base64.RawURLEncoding.EncodeToString(b)
	var raw []byte
	err := e.pool.QueryRow(ctx, `SELECT switchboard.endpoint_vend($1, $2, $3, $4, $5, $6)`,
		human, "agent-"+human, store.CredentialHash(cred), cred[:8], queues, verbs).Scan(&raw)
	if err != nil {
		e.t.Fatal(err)
	}
	var out struct {
		ID   string `json:"endpoint_id"`
		Slug string `json:"slug"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		e.t.Fatal(err)
	}
	return endpoint{ID: out.ID, Slug: out.Slug, Cred: cred}
}

// push creates a todo through SQL, as `switchboard todo push` and ingestion do.
func (e *env) push(ep endpoint, queue, title string) string {
	e.t.Helper()
	var id string
	if err := e.pool.QueryRow(context.Background(),
		`SELECT todo_id FROM switchboard.create_todo($1, $2, $3)`, ep.ID, queue, title).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) state(id string) string {
	e.t.Helper()
	var s string
	if err := e.pool.QueryRow(context.Background(), `SELECT state FROM switchboard.todos WHERE id = $1`, id).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// connect opens an agent session on this server.
func (in *instance) connect(t *testing.T, ep endpoint, o *agentclient.Options) *agentclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agentclient.Connect(ctx, in.url(ep), ep.Cred, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if o == nil || !o.NoStream {
		select {
		case <-c.StreamReady():
		case <-ctx.Done():
			t.Fatal("GET stream did not open")
		}
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or the timeout passes.
// soon is how long a test waits for what the server does at once (a ring, a wake, a stream
// closed, a setting applied): far beyond what that takes, so that a loaded 2-core machine still
// passes; what it takes is measured by make bench, not asserted here. A test that tells "at
// once" from a slower path waits less than that path takes.
const soon = 10 * time.Second

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawRequest sends an HTTP request with optional bearer and returns the response.
func rawRequest(t *testing.T, method, url, cred string, body []byte, hdr map[string]string) *http.Response {
	t.Helper()
	var req *http.Request
	var err error
	if body != nil {
		req, err = http.NewRequest(method, url, bytesReader(body))
	} else {
		req, err = http.NewRequest(method, url, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type serverConfig = server.Config

var agentclientOptionsNoStream = agentclient.Options{NoStream: true}

func itoa(n int) string { return strconv.Itoa(n) }

// metricValue reads one sample from /metrics (0 when absent).
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}
