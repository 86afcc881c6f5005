// Package sdk tests Switchboard with the go-sdk v1.8.0 client as released (this module has no
// replace for it, and default client options): MCP 2026-07-28, and 2025-11-25 for comparison.
// The server runs as a `switchboard serve` process built from the root module.
package sdk

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/tests/testdb"
	"switchboard/tests/testproc"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "switchboard-sdk-test-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "switchboard")
	_, file, _, _ := runtime.Caller(0)
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", binary, "./cmd/switchboard")
	build.Dir = filepath.Join(filepath.Dir(file), "..", "..") // the root module, with the server's go-sdk
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build switchboard: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type env struct {
	t    *testing.T
	dsn  string
	pool *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dsn := testdb.New(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &env{t: t, dsn: dsn, pool: pool}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// replica is one `switchboard serve` process.
type replica struct {
	base   string
	cmd    *exec.Cmd
	out    *testproc.LogBuffer
	exited chan struct{}
}

// term sends SIGTERM and returns the exit status once the process is gone (-1: killed after
// 10 s without exiting).
func (r *replica) term() int {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
		return -1
	}
}

// serve starts a replica and waits until it is ready.
func (e *env) serve() *replica { return e.serveAt(freeAddr(e.t)) }

// serveAt starts a replica on addr (a restart takes its predecessor's) and waits until it is
// ready.
func (e *env) serveAt(addr string) *replica {
	t := e.t
	t.Helper()
	cmd := exec.Command(binary, "serve")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// The drains call faster than the default per-endpoint tool rate allows.
	cmd.Env = append(os.Environ(), "DATABASE_URL="+e.dsn, "SWITCHBOARD_ADDR="+addr, "SWITCHBOARD_REAPER_INTERVAL=1s",
		"SWITCHBOARD_TOOL_RATE=1000000/s", "SWITCHBOARD_TOOL_BURST=1000000")
	out := &testproc.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r := &replica{base: "http://" + addr, cmd: cmd, out: out, exited: exited}
	t.Cleanup(func() {
		r.term()
		if t.Failed() {
			t.Logf("replica %s output:\n%s", addr, out.String())
		}
	})
	eventually(t, 20*time.Second, "replica ready", func() bool {
		resp, err := http.Get(r.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return r
}

func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

type endpoint struct{ ID, Slug, Cred string }

// vend makes an endpoint with all verbs over the queues.
func (e *env) vend(human string, queues []string) endpoint {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `INSERT INTO switchboard.humans (name) VALUES ($1) ON CONFLICT DO NOTHING`, human); err != nil {
		e.t.Fatal(err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	cred := "sbk_" + base64.RawURLEncoding.EncodeToString(b)
	hash := sha256.Sum256([]byte(cred))
	var raw []byte
	if err := e.pool.QueryRow(ctx, `SELECT switchboard.endpoint_vend($1, $2, $3, $4, $5, NULL)`,
		human, "agent-"+human, hash[:], cred[:8], queues).Scan(&raw); err != nil {
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

func (e *env) push(ep endpoint, queue, title string) string {
	e.t.Helper()
	var id string
	if err := e.pool.QueryRow(context.Background(),
		`SELECT todo_id FROM switchboard.create_todo($1, $2, $3)`, ep.ID, queue, title).Scan(&id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// recorder is the client's HTTP transport: it adds the bearer credential and records what
// the answers carried (a session id, the replica that answered behind HAProxy).
type recorder struct {
	cred string

	mu        sync.Mutex
	sessionID []string
	replicas  []string
	versions  map[string]bool
	acks      int // notifications/subscriptions/acknowledged received: the subscriptions are live
}

// acked is how many listen streams the server has acknowledged so far.
func (r *recorder) acked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acks
}

// countAcks is the client's receiving middleware that counts acknowledgements (the SDK's own
// handler drops them).
func (r *recorder) countAcks(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "notifications/subscriptions/acknowledged" {
			r.mu.Lock()
			r.acks++
			r.mu.Unlock()
		}
		return next(ctx, method, req)
	}
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+r.cred)
	resp, err := http.DefaultTransport.RoundTrip(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.versions == nil {
		r.versions = map[string]bool{}
	}
	r.versions[req.Header.Get("Mcp-Protocol-Version")] = true
	if err == nil {
		if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
			r.sessionID = append(r.sessionID, s)
		}
		if s := resp.Header.Get("X-Replica"); s != "" && req.Method == http.MethodPost {
			r.replicas = append(r.replicas, s)
		}
	}
	return resp, err
}

// connect opens a go-sdk v1.8.0 client session with default options (version "" : the SDK's
// default, 2026-07-28 first).
func connect(t *testing.T, url, cred, version string, opts *mcp.ClientOptions) (*mcp.ClientSession, *recorder) {
	t.Helper()
	rec := &recorder{cred: cred}
	client := mcp.NewClient(&mcp.Implementation{Name: "sdk-test", Version: "1"}, opts)
	client.AddReceivingMiddleware(rec.countAcks)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var so *mcp.ClientSessionOptions
	if version != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rec}}, so)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, rec
}

// callJSON calls a tool and decodes its structured result.
func callJSON(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, out any) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return err
	}
	if res.IsError {
		raw, _ := json.Marshal(res.Content)
		return fmt.Errorf("%s: tool error %s", name, raw)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

type claimResult struct {
	Empty bool `json:"empty"`
	Todo  *struct {
		ID string `json:"id"`
	} `json:"todo"`
}
