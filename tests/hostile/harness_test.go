// Package hostile drives the real `switchboard serve` binary, as a child process with its real
// logging, with malformed and abusive requests: every MCP tool and the webhook receiver must
// answer each with its own code (never internal, never 5xx), change nothing, keep its memory
// and keep answering; no secret may appear in anything it logs.
package hostile

import (
	"bufio"
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
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"switchboard/server/store"
	"switchboard/tests/testdb"
	"switchboard/tests/testproc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testproc.Cleanup()
	os.Exit(code)
}

// proc is one running server process over its own database.
type proc struct {
	t    *testing.T
	dsn  string
	pool *pgxpool.Pool
	base string
	cmd  *exec.Cmd
	logs *testproc.LogBuffer
}

// start runs `switchboard serve` on a fresh database with generous rate limits (the tables
// send hundreds of calls) plus env.
func start(t *testing.T, env ...string) *proc {
	t.Helper()
	dsn := testdb.New(t)
	pool, err := store.OpenAdmin(context.Background(), dsn, 4) // fixtures and checksums read tables
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p := &proc{t: t, dsn: dsn, pool: pool}
	p.serve(dsn, env...)
	return p
}

func (p *proc) serve(dsn string, env ...string) {
	t := p.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(testproc.Switchboard(t), "serve")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, "SWITCHBOARD_ADDR="+addr, "SWITCHBOARD_REAPER_INTERVAL=0",
		"SWITCHBOARD_TOOL_RATE=100000/s", "SWITCHBOARD_TOOL_BURST=100000",
		"SWITCHBOARD_WEBHOOK_RATE=100000/s", "SWITCHBOARD_WEBHOOK_BURST=100000")
	for _, e := range env {
		if e != "" {
			cmd.Env = append(cmd.Env, e)
		}
	}
	p.logs = &testproc.LogBuffer{}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.base = cmd, "http://"+addr
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			lines := strings.Split(p.logs.String(), "\n")
			for i, l := range lines {
				if len(l) > 400 {
					lines[i] = l[:400] + "…"
				}
			}
			lines = lines[max(0, len(lines)-60):]
			t.Logf("serve output (tail):\n%s", strings.Join(lines, "\n"))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not get ready: %v\n%s", err, p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rss is the server process's resident set size in bytes (VmRSS).
func (p *proc) rss() int64 {
	p.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		p.t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	p.t.Fatal("no VmRSS")
	return 0
}

func (p *proc) exec(sql string, args ...any) {
	p.t.Helper()
	if _, err := p.pool.Exec(context.Background(), sql, args...); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) scalar(sql string, args ...any) string {
	p.t.Helper()
	var s *string
	if err := p.pool.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		p.t.Fatal(err)
	}
	if s == nil {
		return ""
	}
	return *s
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func uuid() string {
	h := randHex(16)
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
}

// endpoint is a vended endpoint with every verb, queues inbox and ops, and every source.
type endpoint struct{ ID, Slug, Cred string }

func (p *proc) vend(human string) endpoint {
	p.t.Helper()
	p.exec(`INSERT INTO switchboard.humans (name) VALUES ($1) ON CONFLICT DO NOTHING`, human)
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	cred := "sbk_" + base64.RawURLEncoding.EncodeToString(b)
	raw := p.scalar(`SELECT switchboard.endpoint_vend($1, $2, $3, $4, '{inbox,ops}', NULL, 20,
	        '{github,gitea,stripe,slack,cairn,standard,generic}', '{inbox,ops}')::text`,
		human, "agent-"+randHex(3), store.CredentialHash(cred), cred[:8])
	var out struct {
		ID   string `json:"endpoint_id"`
		Slug string `json:"slug"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		p.t.Fatal(err)
	}
	return endpoint{ID: out.ID, Slug: out.Slug, Cred: cred}
}

type hook struct{ ID, Token, Secret string }

func (p *proc) hook(ep endpoint, source string) hook {
	p.t.Helper()
	h := hook{Token: randHex(24), Secret: "whsec_" + randHex(32)}
	h.ID = p.scalar(`SELECT switchboard.webhook_create($1, $2, 'inbox', $3, $4) ->> 'webhook_id'`,
		ep.ID, source, h.Token, h.Secret)
	return h
}

func (p *proc) push(ep endpoint, queue, title string) string {
	p.t.Helper()
	return p.scalar(`SELECT todo_id::text FROM switchboard.create_todo($1, $2, $3)`, ep.ID, queue, title)
}

// checksum is every table of the switchboard schema, row count and content digest.
func (p *proc) checksum() map[string]string {
	p.t.Helper()
	ctx := context.Background()
	rows, err := p.pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'switchboard' ORDER BY 1`)
	if err != nil {
		p.t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	out := map[string]string{}
	for _, tb := range tables {
		var n int64
		var sum string
		err := p.pool.QueryRow(ctx, fmt.Sprintf(
			`SELECT count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM switchboard.%q x`, tb)).
			Scan(&n, &sum)
		if err != nil {
			p.t.Fatal(err)
		}
		out[tb] = fmt.Sprintf("%d rows %s", n, sum)
	}
	return out
}

// --- MCP over raw HTTP ------------------------------------------------------------------------

type mcpSession struct {
	p   *proc
	ep  endpoint
	sid string
	seq int
}

var mcpHeaders = map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
	"Mcp-Protocol-Version": "2025-06-18"}

// answer is one HTTP answer: status, the error code of a JSON error body or tool error
// ("<code>: ..."), or "jsonrpc:<n>" for a JSON-RPC error, or "ok".
type answer struct {
	status int
	code   string
	text   string
	header http.Header
}

func (p *proc) do(method, path string, body []byte, hdr map[string]string, extra http.Header) answer {
	p.t.Helper()
	req, err := http.NewRequest(method, p.base+path, bytes.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if h := hdr["Host"]; h != "" {
		req.Host = h
	}
	for k, vs := range extra {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if body == nil {
		req.Body = nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return parseAnswer(resp, raw)
}

// raw sends request bytes on a new connection and reads one answer (code "timeout" when none
// came within 5 s).
func (p *proc) raw(request string) answer {
	p.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.base, "http://"))
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		p.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return answer{code: "timeout", text: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return parseAnswer(resp, b)
}

func parseAnswer(resp *http.Response, raw []byte) answer {
	a := answer{status: resp.StatusCode, header: resp.Header, text: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				raw = []byte(d)
			}
		}
	}
	var m struct {
		Error json.RawMessage `json:"error"`
		// JSON-RPC
		Result *struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	_ = json.Unmarshal(raw, &m)
	switch {
	case len(m.Error) > 0:
		var e struct {
			Code any `json:"code"`
		}
		_ = json.Unmarshal(m.Error, &e)
		switch c := e.Code.(type) {
		case string:
			a.code = c
		case float64:
			a.code = fmt.Sprintf("jsonrpc:%d", int(c))
		}
	case m.Result != nil && m.Result.IsError && len(m.Result.Content) > 0:
		a.code, _, _ = strings.Cut(m.Result.Content[0].Text, ":")
		a.text = m.Result.Content[0].Text
	case m.Result != nil:
		a.code = "ok"
		if len(m.Result.Content) > 0 {
			a.text = m.Result.Content[0].Text
		}
	}
	return a
}

func (p *proc) session(ep endpoint) *mcpSession {
	p.t.Helper()
	s := &mcpSession{p: p, ep: ep}
	init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"hostile","version":"1"}}}`
	req, _ := http.NewRequest("POST", p.base+"/mcp/"+ep.Slug, strings.NewReader(init))
	for k, v := range mcpHeaders {
		req.Header.Set(k, v)
	}
	req.Header.Set("Authorization", "Bearer "+ep.Cred)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.sid = resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || s.sid == "" {
		p.t.Fatalf("initialize: %d", resp.StatusCode)
	}
	a := s.post([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if a.status != 202 {
		p.t.Fatalf("initialized: %d", a.status)
	}
	return s
}

// post sends one JSON-RPC message on the session.
func (s *mcpSession) post(body []byte) answer {
	h := map[string]string{"Authorization": "Bearer " + s.ep.Cred, "Mcp-Session-Id": s.sid}
	for k, v := range mcpHeaders {
		h[k] = v
	}
	return s.p.do("POST", "/mcp/"+s.ep.Slug, body, h, nil)
}

// call calls a tool with raw argument bytes (sent exactly as given).
func (s *mcpSession) call(tool string, args string) answer {
	s.seq++
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, s.seq, tool, args)
	return s.post([]byte(body))
}

// --- deliveries ---------------------------------------------------------------------------------

func hmacHex(secret string, msg []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(msg)
	return hex.EncodeToString(m.Sum(nil))
}

// githubHeaders signs body as GitHub does.
func githubHeaders(h hook, body []byte, delivery string) http.Header {
	return http.Header{
		"Content-Type":        {"application/json"},
		"X-Github-Event":      {"issues"},
		"X-Github-Delivery":   {delivery},
		"X-Hub-Signature-256": {"sha256=" + hmacHex(h.Secret, body)},
	}
}

func (p *proc) deliver(token string, body []byte, hdr http.Header) answer {
	p.t.Helper()
	return p.do("POST", "/webhooks/w/"+token, body, nil, hdr)
}

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
