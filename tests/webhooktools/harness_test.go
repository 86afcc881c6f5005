// Package webhooktools_test drives the webhook tool family (contract §4.4, §6) the way an agent
// does: through the go-sdk MCP client against a real server and a real PostgreSQL, with
// deliveries signed here, independently of the server's verifier, the way GitHub signs them.
//
// One database and one server serve the whole package; every test makes its own humans and
// endpoints, so tests never see each other's work. The shared server's webhook rate limit is
// raised (tests create, rotate and delete freely); the rate-limit test runs a server of its own
// with the default limits.
package webhooktools_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"switchboard/server"
	"switchboard/server/store"
	"switchboard/tests/e2e/agentclient"
	"switchboard/tests/testdb"
	"switchboard/tests/testproc"
)

var (
	dsn    string
	pool   *pgxpool.Pool      // fixtures and assertions
	shared *instance          // the package's server (raised webhook rate limit)
	logs   testproc.LogBuffer // every server's log lines
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var drop func()
	var err error
	dsn, drop, err = testdb.Create(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer drop()
	pool, err = store.OpenAdmin(ctx, dsn, 4) // fixtures and assertions read tables
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	shared, err = startServer(func(c *server.Config) {
		c.Limits.WebhookRate, c.Limits.WebhookBurst = rate.Inf, 1000
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.stop()
	return m.Run()
}

// instance is one running server on the package database.
type instance struct {
	base string
	stop func() error
}

func startServer(tweak ...func(*server.Config)) (*instance, error) {
	cfg := server.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.ReaperInterval = 0
	cfg.ShutdownTimeout = 5 * time.Second
	for _, f := range tweak {
		f(&cfg)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	cfg.Addr = ln.Addr().String()
	spool, err := store.Open(context.Background(), dsn, 8)
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv, err := server.New(cfg, spool, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		ln.Close()
		spool.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	in := &instance{base: "http://" + cfg.Addr}
	var once sync.Once
	var stopErr error
	in.stop = func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
			spool.Close()
		})
		return stopErr
	}
	select {
	case <-srv.Doorbell().Listening():
	case <-time.After(10 * time.Second):
		_ = in.stop()
		return nil, fmt.Errorf("doorbell listener did not come up")
	}
	return in, nil
}

// startTestServer is startServer for one test (stopped at its end).
func startTestServer(t *testing.T, tweak ...func(*server.Config)) *instance {
	t.Helper()
	in, err := startServer(tweak...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return in
}

// --- fixtures -------------------------------------------------------------------------------

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newUUID is a random (version 4) UUID that names nothing.
func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustExec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventCount and todoCount count what a webhook's deliveries stored.
func eventCount(t *testing.T, webhook string) int {
	return count(t, `SELECT count(*) FROM switchboard.webhook_events WHERE webhook_id = $1`, webhook)
}

func todoCount(t *testing.T, webhook string) int {
	return count(t, `SELECT count(*) FROM switchboard.todos t JOIN switchboard.webhook_events e ON e.id = t.event_id
	                  WHERE e.webhook_id = $1`, webhook)
}

// human creates a human with a fresh name.
func human(t *testing.T) string {
	t.Helper()
	name := "h-" + randHex(4)
	mustExec(t, `SELECT switchboard.human_add($1)`, name)
	return name
}

// grant is an endpoint's scope at vend.
type grant struct {
	queues        []string // default {inbox}
	verbs         []string // nil: every verb
	webhookMax    int
	sources       []string
	webhookQueues []string
}

// endpoint is a vended endpoint with its credential.
type endpoint struct {
	ID, Slug, Cred, Human string
}

// vend makes an endpoint for a new agent of the human.
func vend(t *testing.T, humanName string, g grant) endpoint {
	t.Helper()
	if g.queues == nil {
		g.queues = []string{"inbox"}
	}
	if g.sources == nil {
		g.sources = []string{}
	}
	if g.webhookQueues == nil {
		g.webhookQueues = []string{}
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	cred := "sbk_" + base64.RawURLEncoding.EncodeToString(b)
	var raw []byte
	err := pool.QueryRow(context.Background(),
		`SELECT switchboard.endpoint_vend($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL)`,
		humanName, "agent-"+randHex(3), store.CredentialHash(cred), cred[:8], g.queues, g.verbs,
		g.webhookMax, g.sources, g.webhookQueues).Scan(&raw)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		ID   string `json:"endpoint_id"`
		Slug string `json:"slug"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return endpoint{ID: out.ID, Slug: out.Slug, Cred: cred, Human: humanName}
}

// hooker is the grant most tests use: every verb, a few webhooks of every type on inbox and urgent.
func hooker(t *testing.T, humanName string) endpoint {
	return vend(t, humanName, grant{
		queues: []string{"inbox", "urgent"}, webhookMax: 5,
		sources:       []string{"github", "gitea", "stripe", "slack", "cairn", "generic"},
		webhookQueues: []string{"inbox", "urgent"},
	})
}

// friendRequest opens an edge from -> to (pending) and returns its id.
func friendRequest(t *testing.T, from, to string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(),
		`SELECT switchboard.friend_request($1, $2) ->> 'id'`, from, to).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func friendDecide(t *testing.T, edge, state string) {
	t.Helper()
	mustExec(t, `SELECT switchboard.friend_decide($1, $2)`, edge, state)
}

// befriend makes an approved edge from -> to.
func befriend(t *testing.T, from, to string) string {
	t.Helper()
	id := friendRequest(t, from, to)
	friendDecide(t, id, "approved")
	return id
}

// --- the agent ------------------------------------------------------------------------------

// agent is one MCP session of an endpoint.
type agent struct {
	t  *testing.T
	ep endpoint
	c  *agentclient.Client
}

// connect opens a session on the shared server (no GET stream: these tests need no doorbell).
func connect(t *testing.T, ep endpoint) *agent {
	return connectTo(t, shared, ep)
}

func connectTo(t *testing.T, in *instance, ep endpoint) *agent {
	t.Helper()
	return dial(t, in, ep, true)
}

// listen opens a session on the shared server with its GET stream open (doorbell rings).
func listen(t *testing.T, ep endpoint) *agent {
	t.Helper()
	return dial(t, shared, ep, false)
}

func dial(t *testing.T, in *instance, ep endpoint, noStream bool) *agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agentclient.Connect(ctx, in.base+"/mcp/"+ep.Slug, ep.Cred, &agentclient.Options{NoStream: noStream})
	if err != nil {
		t.Fatal(err)
	}
	if !noStream {
		select {
		case <-c.StreamReady():
		case <-ctx.Done():
			t.Fatal("GET stream did not open")
		}
	}
	t.Cleanup(func() {
		_ = c.Close()
		if t.Failed() {
			dumpErrors(t)
		}
	})
	return &agent{t: t, ep: ep, c: c}
}

// dumpErrors shows the server's error lines (once per test) when a test failed: an internal
// tool error says no more than "internal" to the agent.
func dumpErrors(t *testing.T) {
	if dumped.Swap(true) {
		return
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) {
			t.Log(line)
		}
	}
}

var dumped atomic.Bool

// obj is a decoded JSON object.
type obj = map[string]any

// call runs a verb that must succeed and returns its structured result.
func (a *agent) call(verb string, args any) obj {
	a.t.Helper()
	raw, err := a.c.Call(ctxT(a.t), verb, args)
	if err != nil {
		a.t.Fatalf("%s: %v", verb, err)
	}
	var out obj
	if err := json.Unmarshal(raw, &out); err != nil {
		a.t.Fatalf("%s: %v in %s", verb, err, raw)
	}
	return out
}

// into runs a verb that must succeed and decodes its result into out.
func (a *agent) into(verb string, args, out any) {
	a.t.Helper()
	raw, err := a.c.Call(ctxT(a.t), verb, args)
	if err != nil {
		a.t.Fatalf("%s: %v", verb, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		a.t.Fatalf("%s: %v in %s", verb, err, raw)
	}
}

// fail runs a verb that must fail with the tool error code and returns the error.
func (a *agent) fail(code, verb string, args any) *agentclient.ToolError {
	a.t.Helper()
	raw, err := a.c.Call(ctxT(a.t), verb, args)
	te, ok := err.(*agentclient.ToolError)
	if !ok || te.Code != code {
		a.t.Fatalf("%s %v: want tool error %s, got %v (result %s)", verb, args, code, err, raw)
	}
	return te
}

// raw runs a verb and returns the whole CallToolResult as JSON: what the agent's model sees,
// byte for byte, for "identical answer" comparisons.
func (a *agent) raw(verb string, args any) string {
	a.t.Helper()
	res, err := a.c.CallRaw(ctxT(a.t), verb, args)
	if err != nil {
		a.t.Fatalf("%s: %v", verb, err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		a.t.Fatal(err)
	}
	return string(b)
}

// rawResult is raw with the decoded result too.
func (a *agent) rawResult(verb string, args any) *mcp.CallToolResult {
	a.t.Helper()
	res, err := a.c.CallRaw(ctxT(a.t), verb, args)
	if err != nil {
		a.t.Fatalf("%s: %v", verb, err)
	}
	return res
}

// webhook is a create_webhook / rotate_webhook result.
type webhook struct {
	WebhookID     string `json:"webhook_id"`
	IngestURL     string `json:"ingest_url"`
	SourceType    string `json:"source_type"`
	TargetQueue   string `json:"target_queue"`
	TrustMode     string `json:"trust_mode"`
	SigningSecret string `json:"signing_secret"`
	CreatedAt     string `json:"created_at"`
	RotatedAt     string `json:"rotated_at"`
}

func (a *agent) createWebhook(source, queue string) webhook {
	a.t.Helper()
	var w webhook
	a.into("create_webhook", obj{"source_type": source, "target_queue": queue}, &w)
	return w
}

// todoIDs lists the ids of the endpoint's todos (list_todos, newest first).
func (a *agent) todoIDs(args obj) []string {
	a.t.Helper()
	var out struct {
		Todos []struct {
			ID string `json:"id"`
		} `json:"todos"`
	}
	a.into("list_todos", args, &out)
	ids := make([]string, 0, len(out.Todos))
	for _, td := range out.Todos {
		ids = append(ids, td.ID)
	}
	return ids
}

// --- deliveries -----------------------------------------------------------------------------

// delivery is the receiver's answer.
type delivery struct {
	Status    int
	Raw       string
	Todos     []deliveredTodo `json:"todos"`
	Created   int             `json:"created"`
	ID        string          `json:"id"`
	Queue     string          `json:"queue"`
	Verified  bool            `json:"verified"`
	TrustMode string          `json:"trust_mode"`
	Dropped   bool            `json:"dropped"`
	Faulted   bool            `json:"faulted"`
}

type deliveredTodo struct {
	ID         string `json:"id"`
	EndpointID string `json:"endpoint_id"`
	Queue      string `json:"queue"`
	Created    bool   `json:"created"`
}

func (d delivery) endpoints() []string {
	out := make([]string, 0, len(d.Todos))
	for _, td := range d.Todos {
		out = append(out, td.EndpointID)
	}
	return out
}

// githubSign is GitHub's signature: sha256= + hex HMAC-SHA256(secret, body).
func githubSign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// post sends one delivery to an ingest URL.
func post(t *testing.T, url string, body []byte, header http.Header) delivery {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	d := delivery{Status: resp.StatusCode, Raw: string(b)}
	if resp.StatusCode == http.StatusAccepted {
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("202 body %s: %v", b, err)
		}
	}
	return d
}

// github posts a delivery signed with secret as GitHub does, with a fresh delivery id.
func github(t *testing.T, url, secret, event string, body []byte) delivery {
	t.Helper()
	return post(t, url, body, http.Header{
		"Content-Type":        {"application/json"},
		"User-Agent":          {"GitHub-Hookshot/test"},
		"X-Github-Event":      {event},
		"X-Github-Delivery":   {"d-" + randHex(8)},
		"X-Hub-Signature-256": {githubSign(secret, body)},
	})
}

// mustDeliver is github expecting 202.
func mustDeliver(t *testing.T, w webhook, body string) delivery {
	t.Helper()
	d := github(t, w.IngestURL, w.SigningSecret, "pull_request", []byte(body))
	if d.Status != http.StatusAccepted {
		t.Fatalf("delivery: %d %s", d.Status, d.Raw)
	}
	return d
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func mustContainNone(t *testing.T, what, hay string, needles ...string) {
	t.Helper()
	for _, n := range needles {
		if n != "" && strings.Contains(hay, n) {
			t.Fatalf("%s contains %q: %s", what, n, hay)
		}
	}
}
