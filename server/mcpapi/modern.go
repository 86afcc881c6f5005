package mcpapi

// MCP 2026-07-28 (SEP-2575, SEP-2567): no initialize, no Mcp-Session-Id; every request carries
// its protocol version and client capabilities in _meta, and server-to-client notifications
// travel on a subscriptions/listen request. A request is served by the SDK's
// StreamableHTTPHandler in stateless mode (server/discover, the per-request _meta, the
// Mcp-Method / Mcp-Name header checks, the new error codes), on the endpoint's mcp.Server, and
// leaves nothing behind in this process. Switchboard's own rules are ServeHTTP's, as on
// sessions.
//
// A listen stream lives as long as its request, and is what a session's GET stream is on 2025:
// it counts against the endpoint's session cap, a draining replica refuses it, it ends when its
// credential expires or stops resolving, and a client that declares the claude/channel
// capability is rung on it by the doorbell (through ServerSession.Notify, as sessions are).

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/store"
)

const (
	listenMethod = "subscriptions/listen"
	channelCap   = "claude/channel"                           // the experimental capability of the doorbell
	ackMethod    = "notifications/subscriptions/acknowledged" // first message on a listen stream
	toolsTTLMs   = 3_600_000                                  // an endpoint's allowlist never changes
)

// modern reports whether a request is on the sessionless protocol: it names a version from
// 2026-07-28 on and no session. (A 2025 client always sends a session id after initialize,
// and initialize itself carries no 2026 version header.)
func modern(r *http.Request) bool {
	return r.Header.Get(sessionHeader) == "" && r.Header.Get(versionHeader) >= newProtocol
}

// listen is an open subscriptions/listen or events/stream request: end ends it (revocation,
// rotation), saying why.
type listen struct {
	cred []byte // the credential hash it was opened with (closeUnresolvedListens)
	end  func(reason string)
}

// streamEnd tells an events/stream why it must end, before its context is cancelled, so that
// it can say so (notifications/events/terminated: events.go).
type streamEnd struct {
	once   sync.Once
	done   chan struct{}
	reason string // set before done closes
}

type streamEndKey struct{}

// streamEndGrace is how long an events/stream told to end has to say so before it is cancelled.
const streamEndGrace = 2 * time.Second

// serveListen serves a subscriptions/listen request of endpoint e (the SDK checks that
// Mcp-Method names the body's method) under the rules of a stream: refused while draining or
// at the endpoint's cap, ended by a revocation of the endpoint (Revoke), a credential that no
// longer resolves (closeUnresolvedListens), its expiry (an OAuth access token; zero: none) or
// shutdown. The SDK's listen handler ends with the request's context; an events/stream (events)
// is told why it ends first, on revocation and rotation (streamEnd).
func (h *Handler) serveListen(w http.ResponseWriter, r *http.Request, e *endpointEntry, cred []byte, expires time.Time, sdk http.Handler, events bool) {
	if h.Draining() {
		refuseDraining(w) // a new stream belongs on another replica (drain.go)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if !expires.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, expires)
		defer cancel()
	}
	end := func(string) { cancel() }
	if events {
		se := &streamEnd{done: make(chan struct{})}
		ctx = context.WithValue(ctx, streamEndKey{}, se)
		end = func(reason string) {
			se.once.Do(func() { se.reason = reason; close(se.done) })
			time.AfterFunc(streamEndGrace, cancel)
		}
	}
	l := &listen{cred: cred, end: end}
	h.mu.Lock()
	full, revoked := e.streams() >= h.o.MaxSessions, e.revoked
	if !full && !revoked {
		e.listens++
		e.open[l] = struct{}{}
	}
	h.mu.Unlock()
	switch {
	case revoked:
		h.unauthenticated(w, r, false)
		return
	case full:
		h.tooManySessions(w)
		return
	}
	defer func() {
		h.mu.Lock()
		e.listens--
		delete(e.open, l)
		h.mu.Unlock()
	}()
	stop := context.AfterFunc(h.closed, cancel)
	defer stop()
	sdk.ServeHTTP(w, r.WithContext(ctx))
}

// serveListenChannel attaches a listen to the doorbell (resources/updated comes from its reads)
// and, for a client that declares claude/channel, keeps the stream open and lets it be rung once
// the ack is out (afterAck): the SDK's listen handler returns at once when no standard
// notification was asked for, but the doorbell's still travel on the stream.
func (h *Handler) serveListenChannel(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		e := entryFor(req.GetExtra())
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if method != listenMethod || h.o.Bell == nil || e == nil || ss == nil {
			return next(ctx, method, req)
		}
		bs := h.o.Bell.Attach(e.ep.ID, "listen-"+strconv.FormatUint(h.callSeq.Add(1), 36), channelSender(ss))
		defer bs.Close()
		channel := false
		if p := ss.InitializeParams(); p != nil && p.Capabilities != nil {
			_, channel = p.Capabilities.Experimental[channelCap]
		}
		if channel {
			h.mu.Lock()
			h.acks[ss] = bs.StreamOpened // the ring must come after the ack, the stream's first message
			h.mu.Unlock()
			defer func() {
				h.mu.Lock()
				delete(h.acks, ss)
				h.mu.Unlock()
			}()
		}
		res, err := next(ctx, method, req)
		if channel && err == nil {
			<-ctx.Done() // until the request ends (client gone, or cancelled here)
		}
		return res, err
	}
}

// afterAck runs a channel listen's hook once its ack is written.
func (h *Handler) afterAck(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method == ackMethod && err == nil {
			ss, _ := req.GetSession().(*mcp.ServerSession)
			h.mu.Lock()
			opened := h.acks[ss]
			h.mu.Unlock()
			if opened != nil {
				opened()
			}
		}
		return res, err
	}
}

// cacheable sets tools/list's ttlMs: an endpoint's allowlist is immutable, so a client may
// keep the list for an hour (it is told of a change by tools/list_changed anyway).
func cacheable(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
	if _, ok := req.(*mcp.ListToolsRequest); ok {
		c.TTLMs = toolsTTLMs
	}
}

// maxTrusted bounds the credentials remembered (one per client, a few dozen bytes each).
const maxTrusted = 10_000

// trustedCred is a credential the database confirmed for an endpoint, in an epoch of the
// revocation feed.
type trustedCred struct {
	ep    store.Endpoint
	epoch uint64
}

// trustedCredential authenticates a 2026-07-28 request without the database, by the rule of
// trustedSession: its credential (the same hash, on the same path) was confirmed during the
// current epoch of the revocation feed. A revocation forgets it as soon as its notification
// arrives (Revoke), a rotation too (Rotated); a feed that was down trusts nothing.
func (h *Handler) trustedCredential(r *http.Request, hash []byte) (store.Endpoint, bool) {
	epoch := h.epoch()
	if epoch == 0 {
		return store.Endpoint{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.creds[string(hash)]
	if !ok || c.epoch != epoch || c.ep.Slug != r.PathValue("slug") {
		return store.Endpoint{}, false
	}
	if _, gone := h.revoked[c.ep.ID]; gone {
		return store.Endpoint{}, false
	}
	if !c.ep.Expires.IsZero() && !time.Now().Before(c.ep.Expires) {
		return store.Endpoint{}, false // an expired OAuth token: the database refuses it
	}
	return c.ep, true
}

// vouchCredential remembers a database confirmation of a credential.
func (h *Handler) vouchCredential(hash []byte, ep store.Endpoint, epoch uint64) {
	if epoch == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, gone := h.revoked[ep.ID]; gone {
		return // the lookup raced the revocation
	}
	if len(h.creds) >= maxTrusted {
		clear(h.creds) // rare: they are confirmed again one request each
	}
	h.creds[string(hash)] = trustedCred{ep: ep, epoch: epoch}
}

// forgetCredentialsLocked drops the remembered credentials of an endpoint. h.mu must be held.
func (h *Handler) forgetCredentialsLocked(endpointID string) {
	for k, c := range h.creds {
		if c.ep.ID == endpointID {
			delete(h.creds, k)
		}
	}
}
