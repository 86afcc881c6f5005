// Package agentclient is an MCP agent for tests and benchmarks: the go-sdk client over
// Streamable HTTP with a bearer credential, typed tool calls, and the doorbell notifications
// (notifications/claude/channel) that the SDK client itself ignores.
//
//	c, err := agentclient.Connect(ctx, mcpURL, credential, nil)
//	defer c.Close()
//	out, err := c.Call(ctx, "claim_next", map[string]any{})   // tool error → *ToolError
//	n := <-c.Notifications()                                   // a doorbell ring
package agentclient

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ChannelMethod is the doorbell's notification method.
const ChannelMethod = "notifications/claude/channel"

// Notification is one doorbell ring as received.
type Notification struct {
	Content string            `json:"content"`
	Meta    map[string]string `json:"meta"`
	At      time.Time         `json:"-"` // when the client read it
}

// Options tune a client. The zero value is fine.
type Options struct {
	// Transport is the HTTP transport (default: a shared one keeping 64 idle connections per
	// host, so many clients do not churn connections).
	Transport http.RoundTripper
	// NoStream skips the standalone GET stream (no notifications).
	NoStream bool
	// Buffer is the capacity of the notification channel (default 256); overflow is counted
	// in Dropped.
	Buffer int
	// Name is the client name sent in initialize.
	Name string
	// OnProgress receives progress notifications (notifications/progress).
	OnProgress func(*mcp.ProgressNotificationParams)
	// ProtocolVersion is the version to ask for (default 2025-11-25: a session, with the GET
	// stream; "2026-07-28" speaks the sessionless protocol, which has no GET stream).
	ProtocolVersion string
}

// DefaultTransport is shared by clients that set no Transport.
var DefaultTransport http.RoundTripper = &http.Transport{
	Proxy:               nil,
	MaxIdleConns:        256,
	MaxIdleConnsPerHost: 64,
	IdleConnTimeout:     90 * time.Second,
}

// Client is one MCP session of an agent.
type Client struct {
	Session *mcp.ClientSession
	notes   chan Notification
	dropped atomic.Int64
	gate    *gate
	ready   chan struct{} // closed when the GET stream is open
	once    sync.Once
}

// Connect opens a session at the endpoint's MCP URL with the bearer credential.
func Connect(ctx context.Context, url, credential string, o *Options) (*Client, error) {
	if o == nil {
		o = &Options{}
	}
	base := o.Transport
	if base == nil {
		base = DefaultTransport
	}
	n := o.Buffer
	if n <= 0 {
		n = 256
	}
	c := &Client{notes: make(chan Notification, n), gate: newGate(), ready: make(chan struct{})}
	rt := &roundTripper{base: base, credential: credential, onEvent: c.event, gate: c.gate,
		onStream: func() { c.once.Do(func() { close(c.ready) }) }}
	hc := &http.Client{Transport: rt}
	name := o.Name
	if name == "" {
		name = "agentclient"
	}
	var copts *mcp.ClientOptions
	if f := o.OnProgress; f != nil {
		copts = &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			f(r.Params)
		}}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: name, Version: "test"}, copts)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: o.NoStream, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: cmp.Or(o.ProtocolVersion, "2025-11-25")})
	if err != nil {
		return nil, err
	}
	c.Session = cs
	return c, nil
}

// StreamReady is closed once the server has accepted the GET stream: from then on the
// session receives doorbell notifications.
func (c *Client) StreamReady() <-chan struct{} { return c.ready }

// Close ends the session (DELETE).
func (c *Client) Close() error { return c.Session.Close() }

// Notifications delivers doorbell rings in arrival order.
func (c *Client) Notifications() <-chan Notification { return c.notes }

// Dropped counts notifications lost because the channel was full.
func (c *Client) Dropped() int64 { return c.dropped.Load() }

// ToolError is a tool failure: the "<code>: <message>" text of an isError result.
type ToolError struct {
	Code    string
	Message string
}

func (e *ToolError) Error() string { return e.Code + ": " + e.Message }

// CodeOf is the tool error code of err, "" when err is nil or not a tool error.
func CodeOf(err error) string {
	var te *ToolError
	if errors.As(err, &te) {
		return te.Code
	}
	return ""
}

// Call calls a tool and returns its structured result; a tool failure is a *ToolError,
// anything else (transport, JSON-RPC) a plain error.
func (c *Client) Call(ctx context.Context, verb string, args any) (json.RawMessage, error) {
	res, err := c.CallRaw(ctx, verb, args)
	if err != nil {
		return nil, err
	}
	text := ""
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			text = tc.Text
		}
	}
	if res.IsError {
		code, msg, _ := strings.Cut(text, ": ")
		return nil, &ToolError{Code: code, Message: msg}
	}
	// The text content is the structured result serialized; use it rather than re-encoding
	// the decoded structuredContent.
	if text != "" && json.Valid([]byte(text)) {
		return json.RawMessage(text), nil
	}
	return json.Marshal(res.StructuredContent)
}

// CallRaw calls a tool and returns the SDK's result as is.
func (c *Client) CallRaw(ctx context.Context, verb string, args any) (*mcp.CallToolResult, error) {
	if args == nil {
		args = map[string]any{}
	}
	return c.Session.CallTool(ctx, &mcp.CallToolParams{Name: verb, Arguments: args})
}

// CallInto calls a tool and decodes its result into out.
func (c *Client) CallInto(ctx context.Context, verb string, args, out any) error {
	raw, err := c.Call(ctx, verb, args)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// event receives every SSE data payload the client reads and keeps the channel notifications.
func (c *Client) event(data []byte) {
	if !bytes.Contains(data, []byte(ChannelMethod)) {
		return
	}
	var msg struct {
		Method string       `json:"method"`
		Params Notification `json:"params"`
	}
	if json.Unmarshal(data, &msg) != nil || msg.Method != ChannelMethod {
		return
	}
	msg.Params.At = time.Now()
	select {
	case c.notes <- msg.Params:
	default:
		c.dropped.Add(1)
	}
}

// PauseStream stops reading the GET stream (a stuck client: the server's writes back up);
// ResumeStream reads on.
func (c *Client) PauseStream()  { c.gate.set(true) }
func (c *Client) ResumeStream() { c.gate.set(false) }

// gate blocks readers while closed.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while reading is allowed
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) set(paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		if paused {
			g.open = make(chan struct{})
		}
	default:
		if !paused {
			close(g.open)
		}
	}
}

func (g *gate) wait() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	<-ch
}

// roundTripper adds the bearer credential and tees server-sent events to onEvent. It works
// below the SDK, which drops notification methods it does not know.
type roundTripper struct {
	base       http.RoundTripper
	credential string
	onEvent    func([]byte)
	gate       *gate
	onStream   func() // a GET stream was accepted
}

func (t *roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if t.credential != "" {
		r.Header.Set("Authorization", "Bearer "+t.credential)
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	// The doorbell writes on the standalone GET stream only (never on a call's response).
	if r.Method == http.MethodGet && resp.StatusCode == http.StatusOK &&
		strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &sseTee{ReadCloser: resp.Body, onEvent: t.onEvent, gate: t.gate}
		t.onStream()
	}
	return resp, nil
}

// sseTee passes a body through unchanged while splitting it into SSE events.
type sseTee struct {
	io.ReadCloser
	onEvent func([]byte)
	gate    *gate
	line    []byte
	data    []byte
}

func (s *sseTee) Read(p []byte) (int, error) {
	if s.gate != nil {
		s.gate.wait()
	}
	n, err := s.ReadCloser.Read(p)
	for _, b := range p[:n] {
		if b != '\n' {
			s.line = append(s.line, b)
			continue
		}
		line := bytes.TrimSuffix(s.line, []byte("\r"))
		switch {
		case len(line) == 0:
			if len(s.data) > 0 {
				s.onEvent(s.data)
			}
			s.data = s.data[:0]
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if len(s.data) > 0 {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, d...)
		}
		s.line = s.line[:0]
	}
	return n, err
}

// WaitNotification waits for a ring whose meta.todo_id is id (other rings are skipped).
func (c *Client) WaitNotification(ctx context.Context, id string) (Notification, error) {
	for {
		select {
		case n := <-c.notes:
			if id == "" || n.Meta["todo_id"] == id {
				return n, nil
			}
		case <-ctx.Done():
			return Notification{}, fmt.Errorf("no notification for todo %s: %w", id, ctx.Err())
		}
	}
}
