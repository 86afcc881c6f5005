package mcpapi

// MCP 2026-07-28 (SEP-2575, SEP-2567): no initialize, no Mcp-Session-Id; every request carries
// its protocol version and client capabilities in _meta, and server-to-client notifications
// travel on a subscriptions/listen request. The protocol is the SDK's: a request is served by
// its StreamableHTTPHandler in stateless mode (server/discover, the per-request _meta, the
// Mcp-Method / Mcp-Name header checks, the new error codes), on the endpoint's mcp.Server, and
// leaves nothing behind in this process. What stays here is Switchboard's own rules, applied
// before the SDK sees the request and the same as on sessions (ServeHTTP): the bearer check,
// scope, body cap, rate limits and the 401/429/503 answers.
//
// A listen stream is the one exception to "through the handler": it is connected here, on
// the SDK's StreamableServerTransport in stateless mode, so that the doorbell can write
// notifications/claude/channel on it (channel.go; the SDK sends only standard notifications).
// It counts against the endpoint's session cap (MaxSessions) together with the sessions. On
// HTTP/1.1 it is taken out of net/http once its ack is written, as a GET stream is
// (listenStream in stream.go).

import (
	"bytes"
	"context"
	"encoding/json"
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

type entryKey struct{}

// modern reports whether a request is on the sessionless protocol: it names a version from
// 2026-07-28 on and no session. (A 2025 client always sends a session id after initialize,
// and initialize itself carries no 2026 version header.)
func modern(r *http.Request) bool {
	return r.Header.Get(sessionHeader) == "" && r.Header.Get(versionHeader) >= newProtocol
}

// newStateless is the SDK's handler for 2026-07-28 requests. The DNS-rebinding guard and the
// body cap are ServeHTTP's (hostAllowed, MaxBody), so the SDK's own are off.
func (h *Handler) newStateless() *mcp.StreamableHTTPHandler {
	return mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if e, ok := r.Context().Value(entryKey{}).(*endpointEntry); ok {
			return e.srv
		}
		return nil
	}, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		JSONResponse:                 true, // as on sessions (SWITCHBOARD.md, patch 2)
		DisableLocalhostProtection:   true,
		MaxRequestBodyBytes:          -1,
		PropagateRequestCancellation: true, // a call ends with its POST (there is no cancel notification to wait for)
	})
}

// serveModern serves one 2026-07-28 request of endpoint e, whose credential expires at expires
// (an OAuth access token; zero for an sbk_ credential).
func (h *Handler) serveModern(w http.ResponseWriter, r *http.Request, e *endpointEntry, rec *requestLog, expires time.Time) {
	rec.entry = e
	callID := strconv.FormatUint(h.callSeq.Add(1), 36)
	r.Header.Set(callHeader, callID)
	h.calls.Store(callID, rec)
	defer h.calls.Delete(callID)
	r = r.WithContext(context.WithValue(r.Context(), entryKey{}, e))
	// Mcp-Method is required on 2026-07-28 and the SDK refuses one that does not match the
	// body, so it is enough to pick the two requests served here; no other body is read twice.
	if m := r.Header.Get("Mcp-Method"); r.Method == http.MethodPost && r.Body != nil &&
		(m == listenMethod || m == "server/discover") {
		body, err := readBody(w, r)
		if err != nil {
			return
		}
		if l, ok := parseListen(body); ok {
			h.serveListen(w, r, e, l, expires)
			return
		}
		if legacyChannelClient(body) {
			refuseNewProtocol(w, r, r.Header.Get(versionHeader))
			return
		}
	}
	h.stateless.ServeHTTP(w, r)
}

// readBody reads the (capped) body and puts it back for the SDK.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "payload_too_large", "request body exceeds 1 MiB")
		return nil, err
	}
	_ = r.Body.Close()
	body := buf.Bytes()
	r.Body = readCloser{bytes.NewReader(body)}
	return body, nil
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// listenRequest is what serveListen needs of a subscriptions/listen body.
type listenRequest struct {
	channel bool                  // the client declares the claude/channel capability
	client  *mcp.InitializeParams // the stream's session state, from the request's _meta
}

// parseListen reports whether a body is a single subscriptions/listen request. A cheap
// substring test first: every other request pays no second decode.
//
// It also reads what the SDK would keep of the request as its session's InitializeParams (the
// _meta's protocol version, client info and capabilities): serveListen hands them over as the
// session's state, so the SDK keeps these instead of its own decoding, which makes every JSON
// object a map sized for 64 entries (a claude/channel client's capabilities kept 4.8 KiB per
// stream that way; docs/benchmarks.md). The SDK still validates the request's _meta itself.
func parseListen(body []byte) (listenRequest, bool) {
	if !bytes.Contains(body, []byte(listenMethod)) {
		return listenRequest{}, false
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != listenMethod {
		return listenRequest{}, false
	}
	meta := msg.Params.Meta
	var p mcp.InitializeParams
	var caps struct {
		mcp.ClientCapabilities
		Roots *mcp.RootCapabilities `json:"roots,omitempty"` // as the SDK reads them (its #607)
	}
	if json.Unmarshal(meta[mcp.MetaKeyProtocolVersion], &p.ProtocolVersion) != nil ||
		json.Unmarshal(meta[mcp.MetaKeyClientCapabilities], &caps) != nil {
		return listenRequest{}, true // the SDK refuses it
	}
	p.Capabilities = &caps.ClientCapabilities
	if caps.Roots != nil {
		p.Capabilities.RootsV2, p.Capabilities.Roots = caps.Roots, *caps.Roots
	}
	if raw, ok := meta[mcp.MetaKeyClientInfo]; ok {
		p.ClientInfo = new(mcp.Implementation)
		if json.Unmarshal(raw, p.ClientInfo) != nil {
			return listenRequest{}, true // the SDK refuses it
		}
	}
	_, channel := caps.Experimental[channelCap]
	return listenRequest{channel: channel, client: &p}, true
}

// serveListen serves a subscriptions/listen stream: the SDK's listen handler (the ack, resource
// subscriptions, resources/updated), and for a client that declares claude/channel the
// doorbell, by the rules of a session's GET stream (one listener rung per todo, ring-again,
// a buffer of 16). The stream lives until the client ends the request, or until its credential
// expires (an OAuth access token) or stops resolving (closeUnresolvedListens).
func (h *Handler) serveListen(w http.ResponseWriter, r *http.Request, e *endpointEntry, l listenRequest, expires time.Time) {
	if h.Draining() {
		refuseDraining(w) // a new stream belongs on another replica (drain.go)
		return
	}
	h.mu.Lock()
	full := e.streams() >= h.o.MaxSessions
	if !full {
		e.listens++
	}
	h.mu.Unlock()
	if full {
		h.tooManySessions(w)
		return
	}
	ctx, release := context.WithCancel(r.Context())
	defer release()
	cred, _ := bearer(r) // ServeHTTP checked it
	ls := &listenStream{
		w:          w,
		cred:       cred,
		hijackable: r.ProtoMajor == 1 && r.ProtoMinor >= 1, // chunked encoding needs HTTP/1.1; HTTP/2 cannot be hijacked
		release:    release,
		opened:     func() {},
		closed:     h.closed,
	}
	var ends []func() // run in reverse when the listen ends, on whichever goroutine ends it
	var endOnce sync.Once
	ls.end = func() {
		endOnce.Do(func() {
			for i := len(ends) - 1; i >= 0; i-- {
				ends[i]()
			}
		})
	}
	ends = append(ends, func() {
		h.mu.Lock()
		e.listens--
		h.mu.Unlock()
	})

	id := "listen-" + strconv.FormatUint(h.callSeq.Add(1), 36)
	t := &mcp.StreamableServerTransport{Stateless: true, JSONResponse: true}
	ct := &channelTransport{inner: t, listen: ls}
	channel := l.channel && h.o.Bell != nil
	if h.o.Bell != nil {
		// Attached either way: the bell reads only the endpoints it has, and resources/updated
		// comes from its reads. Only a channel listener opens a stream it can be rung on.
		bs := h.o.Bell.Attach(e.ep.ID, id, ct.notify)
		ends = append(ends, bs.Close)
		if channel {
			ls.opened = bs.StreamOpened // rung only once the ack is out: it must be the stream's first message
		}
	}
	// The session starts with the request's client as its state (parseListen says why).
	ss, err := e.srv.Connect(r.Context(), ct, &mcp.ServerSessionOptions{State: &mcp.ServerSessionState{InitializeParams: l.client}})
	if err != nil {
		ls.end()
		h.log.Error("listen connect failed", "endpoint_id", e.ep.ID, "err", err)
		writeError(w, http.StatusInternalServerError, store.CodeInternal, "internal error")
		return
	}
	if channel {
		h.channelListens.Store(ss, ls)
		ends = append(ends, func() { h.channelListens.Delete(ss) })
	}
	ends = append(ends, func() { _ = ss.Close() }) // ends the SDK's listen handler, which parks until then
	// Shutting down ends the stream too (a hijacked one closes its connection: acked).
	stop := context.AfterFunc(h.closed, func() { _ = ss.Close() })
	ends = append(ends, func() { stop() })
	// Set up: from here a revocation of the endpoint closes it (Revoke).
	ends = append(ends, func() {
		h.mu.Lock()
		delete(e.open, ls)
		h.mu.Unlock()
	})
	h.mu.Lock()
	revoked := e.revoked
	if !revoked {
		if e.open == nil {
			e.open = map[*listenStream]struct{}{}
		}
		e.open[ls] = struct{}{}
	}
	h.mu.Unlock()
	if revoked {
		ls.end()
		h.unauthenticated(w, r, false)
		return
	}
	// A listen has no next request for an expired token to be refused on: it ends at the
	// expiry, and the client listens again with its refreshed token.
	if !expires.IsZero() {
		expiry := time.AfterFunc(time.Until(expires), ls.close)
		ends = append(ends, func() { expiry.Stop() })
	}
	// As StreamableHTTPHandler does (modern() checked the version), so the transport serves
	// the request on 2026-07-28 (server/third_party/go-sdk/SWITCHBOARD.md, patch 4).
	if ls.hijackable {
		w = &listenWriter{ResponseWriter: w}
	}
	t.ServeHTTP(w, r.WithContext(mcp.WithProtocolVersion(ctx, r.Header.Get(versionHeader))))
	if !ls.handlerDone() {
		ls.end() // not hijacked: the SDK's stream ended with the request
	}
}

// holdChannelListen keeps a subscriptions/listen of a claude/channel client open: the SDK's
// listen handler answers at once when no standard notification was asked for, but the
// doorbell's notifications still have to travel on it. A hijacked stream needs no parked
// handler: its answer is dropped (holdResult) and the stream stays open until it ends.
func (h *Handler) holdChannelListen(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != listenMethod || err != nil {
			return res, err
		}
		if ls, ok := h.channelListens.Load(req.GetSession()); ok && !ls.(*listenStream).holdResult() {
			<-ctx.Done() // the SDK's stream: its handler parks until the stream ends
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

// channelOn2025 names the clients that take notifications/claude/channel on a 2025 session's
// GET stream but drop it on 2026-07-28: Claude Code 2.1.328 opens a listen stream there (for
// tools/list_changed only) and skips channels on "a modern protocol revision with no
// unsolicited notification path". Such a client's server/discover is answered as before this
// server spoke 2026-07-28 (-32022, legacy versions only), so it falls back to initialize on
// 2025-11-25 and keeps its doorbell. It is told apart by the clientInfo name in the request's
// _meta: it declares no capability of its own for the channel on either protocol.
var channelOn2025 = map[string]bool{"claude-code": true}

// legacyChannelClient reports whether a body is the server/discover of such a client.
func legacyChannelClient(body []byte) bool {
	if !bytes.Contains(body, []byte("server/discover")) {
		return false
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Meta struct {
				Client struct {
					Name string `json:"name"`
				} `json:"io.modelcontextprotocol/clientInfo"`
			} `json:"_meta"`
		} `json:"params"`
	}
	return json.Unmarshal(body, &msg) == nil && msg.Method == "server/discover" && channelOn2025[msg.Params.Meta.Client.Name]
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
