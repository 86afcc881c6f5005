package mcpapi

// The go-sdk (v1.8.0) has no public call for a notification method of our own choosing:
// ServerSession only sends the standard ones, and its sending path refuses unknown methods.
// The supported seam is the Transport/Connection pair: Server.Connect accepts any Transport.
// channelTransport wraps the session's StreamableServerTransport, keeps the Connection it
// returns, and writes notifications/claude/channel on it directly. Connection.Write is safe for
// concurrent use, and a message written with a context that is not a request handler's (a
// detached one) goes to the session's standalone GET stream. This file is the only place that
// relies on that.

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/doorbell"
)

// channelTransport is an mcp.Transport that remembers its connection.
type channelTransport struct {
	inner   mcp.Transport
	onClose func()                       // called once, when the connection closes
	stream  *atomic.Pointer[eventStream] // the session's hijacked GET stream, if any (stream.go)
	listen  *listenStream                // a subscriptions/listen stream's (modern.go), instead of stream

	mu   sync.Mutex
	conn mcp.Connection
}

func (t *channelTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	var routed mcp.Connection = &streamConn{Connection: c, stream: t.stream}
	if t.listen != nil {
		routed = &listenConn{Connection: c, l: t.listen}
	}
	cc := &closeHook{Connection: routed, onClose: t.onClose}
	t.mu.Lock()
	t.conn = cc
	t.mu.Unlock()
	if p, ok := c.(pusher); ok {
		return pushCloseHook{cc, p}, nil
	}
	return cc, nil
}

// pusher is the go-sdk patch's push delivery of incoming messages (jsonrpc2.PushReader, see
// server/third_party/go-sdk/SWITCHBOARD.md): without it each session keeps a goroutine parked
// in Read. The wrapper must pass it on, or the SDK cannot see it.
type pusher interface {
	PushTo(deliver func(jsonrpc.Message, error))
}

type pushCloseHook struct {
	*closeHook
	p pusher
}

func (c pushCloseHook) PushTo(deliver func(jsonrpc.Message, error)) { c.p.PushTo(deliver) }

// notify writes the doorbell notification on the session's connection (a doorbell.Sender).
// ctx is detached from every request, so the message takes the standalone stream.
func (t *channelTransport) notify(ctx context.Context, p doorbell.Params) error {
	t.mu.Lock()
	c := t.conn
	t.mu.Unlock()
	if c == nil {
		return errNotConnected
	}
	params, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return c.Write(ctx, &jsonrpc.Request{Method: doorbell.Method, Params: params})
}

// closeHook reports the first Close of a connection.
type closeHook struct {
	mcp.Connection
	once    sync.Once
	onClose func()
}

func (c *closeHook) Close() error {
	err := c.Connection.Close()
	if c.onClose != nil {
		c.once.Do(c.onClose)
	}
	return err
}
