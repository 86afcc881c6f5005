package mcpapi

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/doorbell"
	"switchboard/server/store"
)

const (
	sessionHeader  = "Mcp-Session-Id"
	versionHeader  = "Mcp-Protocol-Version"
	newProtocol    = "2026-07-28" // SEP-2575 sessionless protocol: not served (we are stateful)
	entryIdleAfter = 10 * time.Minute
	// callHeader carries the id of the HTTP request's requestLog to the tool handler, through
	// RequestExtra.Header. Always overwritten, so a client cannot set it.
	callHeader = "X-Switchboard-Call"
)

// endpointEntry is one endpoint's server, sessions and rate limits. Guarded by Handler.mu.
type endpointEntry struct {
	ep       store.Endpoint
	srv      *mcp.Server
	buckets  *buckets
	sessions map[string]*session
	listens  int                        // open 2026-07-28 listen streams, capped with the sessions (modern.go)
	open     map[*listenStream]struct{} // the listens that are set up: closed by Revoke
	refs     int
	lastUsed time.Time
	revoked  bool
}

// streams counts what the per-endpoint cap (Options.MaxSessions) bounds: sessions and listen
// streams together. Handler.mu must be held.
func (e *endpointEntry) streams() int { return len(e.sessions) + e.listens }

// session is one MCP session. streams, lastSeen, cred and verified are guarded by Handler.mu.
type session struct {
	id        string
	entry     *endpointEntry
	ss        *mcp.ServerSession
	transport *mcp.StreamableServerTransport
	bell      *doorbell.Session
	stream    atomic.Pointer[eventStream] // the hijacked GET stream (stream.go)
	streams   int
	lastSeen  time.Time
	cred      []byte    // credential hash the database last confirmed for this session
	verified  uint64    // the revocation feed's epoch of that confirmation (see trustedSession)
	until     time.Time // an OAuth token's expiry: trusted no longer (zero: an sbk_ credential)
}

// vouch records a database confirmation of the session's credential. h.mu must be held.
func (s *session) vouch(v *verified) {
	if v != nil {
		s.cred, s.verified, s.until = v.hash, v.epoch, v.until
	}
}

// acquire returns the endpoint's entry (creating it) and holds it for one request; the status
// is 503 while shutting down and 401 for an endpoint revoked here since its lookup began.
func (h *Handler) acquire(ep store.Endpoint) (*endpointEntry, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return nil, http.StatusServiceUnavailable
	}
	if _, gone := h.revoked[ep.ID]; gone {
		return nil, http.StatusUnauthorized
	}
	e := h.entries[ep.ID]
	if e == nil {
		e = h.newEntry(ep)
		h.entries[ep.ID] = e
	}
	e.refs++
	e.lastUsed = time.Now()
	return e, http.StatusOK
}

func (h *Handler) release(e *endpointEntry) {
	h.mu.Lock()
	e.refs--
	e.lastUsed = time.Now()
	h.mu.Unlock()
}

// newEntry makes the endpoint's entry, on the mcp.Server of its allowlist. h.mu must be held.
func (h *Handler) newEntry(ep store.Endpoint) *endpointEntry {
	return &endpointEntry{ep: ep, srv: h.serverFor(ep.Verbs), buckets: newBuckets(h.o.Limits), sessions: map[string]*session{}}
}

// serverFor returns the mcp.Server with exactly the allowlisted tools, shared by every endpoint
// with the same allowlist: building one (its tools' schemas) allocated about 150 KB and kept
// several KB, per endpoint. A call's endpoint is its session's (entryOf). The map holds one
// server per distinct allowlist vended. h.mu must be held.
func (h *Handler) serverFor(verbs []string) *mcp.Server {
	var key strings.Builder
	var tools []*compiledTool
	for _, t := range h.o.Tools.tools {
		if slices.Contains(verbs, t.Name) {
			tools = append(tools, t)
			key.WriteString(t.Name)
			key.WriteByte(',')
		}
	}
	if srv := h.servers[key.String()]; srv != nil {
		return srv
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "switchboard", Version: h.o.Version}, &mcp.ServerOptions{
		Instructions: Instructions,
		Capabilities: &mcp.ServerCapabilities{
			Experimental: map[string]any{channelCap: map[string]any{}},
			Tools:        &mcp.ToolCapabilities{ListChanged: true},
			Resources:    &mcp.ResourceCapabilities{Subscribe: true},
		},
		SubscribeHandler:   subscribed,
		UnsubscribeHandler: unsubscribed,
		SetCacheable:       cacheable,
	})
	allowed := map[string]bool{}
	for _, t := range tools {
		allowed[t.Name] = true
		srv.AddTool(t.mcpTool, h.toolHandler(t))
	}
	srv.AddReceivingMiddleware(h.forbidOutsideAllowlist(allowed), undeclared, h.serveResources, h.holdChannelListen)
	h.servers[key.String()] = srv
	return srv
}

// entryOf is the endpoint entry of a request's session (nil once the session is gone).
func (h *Handler) entryOf(ss *mcp.ServerSession) *endpointEntry {
	if ss == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.sessions[ss.ID()]; s != nil {
		return s.entry
	}
	return nil
}

// errGone answers a call whose session closed while it was on its way.
var errGone = store.Errorf(store.CodeNotFound, "session not found")

// forbidOutsideAllowlist answers a call of a known verb that the endpoint was not granted with
// the tool error forbidden (the SDK would answer "unknown tool"). Nothing else runs.
func (h *Handler) forbidOutsideAllowlist(allowed map[string]bool) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/call" {
				return next(ctx, method, req)
			}
			call, ok := req.(*mcp.CallToolRequest)
			if !ok || allowed[call.Params.Name] || !slices.Contains(Vocabulary, call.Params.Name) {
				return next(ctx, method, req)
			}
			e := h.entryFor(call.Session, call.Extra)
			if e == nil {
				return errorResult(errGone), nil
			}
			serr := store.Errorf(store.CodeForbidden, "the verb %s is not in this endpoint's allowlist", call.Params.Name)
			h.account(h.requestOf(call), e, call.Params.Name, serr, time.Now())
			return errorResult(serr), nil
		}
	}
}

// toolHandler wraps a tool's Run: rate limit, validation, timeout, error shape, accounting.
func (h *Handler) toolHandler(t *compiledTool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		h.m.ToolCallsInFlight.Inc()
		defer h.m.ToolCallsInFlight.Dec()
		e := h.entryFor(req.Session, req.Extra)
		if e == nil {
			return errorResult(errGone), nil
		}
		rec := h.requestOf(req)
		var out json.RawMessage
		bs := h.bellOf(req)
		bs.Called() // a session that calls tools is draining its queue (doorbell again.go)
		serr := e.buckets.take(t.Webhook)
		if serr == nil {
			args, verr := t.validate(req.Params.Arguments)
			if verr != nil {
				serr = verr
			} else {
				call := &Call{Endpoint: e.ep, Store: h.o.Store, Log: h.log, BaseURL: h.o.BaseURL}
				if req.Session != nil {
					call.Session = req.Session.ID()
				}
				timeout := h.o.ToolTimeout
				if t.Waits {
					h.prepareWait(call, req, bs)
					timeout += call.WaitMax
				}
				// The call ends with the HTTP request that carried it (client gone: stop the
				// SQL), or with the SDK's own cancellation (notifications/cancelled), or
				// after its time limit.
				ctx, cancel := context.WithTimeout(ctx, timeout)
				if rec != nil {
					stop := context.AfterFunc(rec.ctx, cancel)
					defer stop()
				}
				res, err := t.Run(ctx, call, args)
				cancel()
				bs.Called() // the end of a long call counts as activity too
				if err == nil && setsLease[t.Name] {
					bs.SetLease()
				}
				if err != nil {
					serr = store.Classify(err)
				} else {
					out = res
				}
			}
		}
		h.account(rec, e, t.Name, serr, start)
		if serr != nil {
			return errorResult(serr), nil
		}
		return okResult(out), nil
	}
}

// requestOf finds the HTTP request of a tool call (nil if unknown).
func (h *Handler) requestOf(req *mcp.CallToolRequest) *requestLog { return h.recordOf(req.Extra) }

// recordOf finds the HTTP request of any request the SDK dispatches (nil if unknown).
func (h *Handler) recordOf(extra *mcp.RequestExtra) *requestLog {
	if extra == nil || extra.Header == nil {
		return nil
	}
	if v, ok := h.calls.Load(extra.Header.Get(callHeader)); ok {
		return v.(*requestLog)
	}
	return nil
}

// account counts a tool call, logs internal failures, and fills the request log line.
func (h *Handler) account(rec *requestLog, e *endpointEntry, verb string, serr *store.Error, start time.Time) {
	code := "ok"
	if serr != nil {
		code = serr.Code
		if code == store.CodeInternal {
			h.log.Error("tool call failed", "verb", verb, "endpoint_id", e.ep.ID, "err", serr.Unwrap())
		}
	}
	h.m.ToolCalls.WithLabelValues(verb, code).Inc()
	h.m.ToolSeconds.WithLabelValues(verb).Observe(time.Since(start).Seconds())
	if rec != nil {
		rec.set(verb, code)
	}
}

// checkPOST applies the transport's media-type rules (StreamableHTTPHandler does this in the SDK).
func checkPOST(w http.ResponseWriter, r *http.Request) bool {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	if !strings.EqualFold(strings.TrimSpace(ct), "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, store.CodeInvalidArgument, "Content-Type must be application/json")
		return false
	}
	if json, stream := accepts(r); !json || !stream {
		writeError(w, http.StatusBadRequest, store.CodeInvalidArgument, "Accept must include application/json and text/event-stream")
		return false
	}
	return true
}

func accepts(r *http.Request) (jsonOK, streamOK bool) {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return
}

// versionOK refuses an unknown Mcp-Protocol-Version, as the SDK's handler does.
func versionOK(w http.ResponseWriter, r *http.Request) bool {
	v := r.Header.Get(versionHeader)
	if v == "" || v >= newProtocol || slices.Contains(mcp.SupportedProtocolVersions(), v) {
		return true
	}
	unsupportedVersion(w, v)
	return false
}

// lookup finds the request's session of endpoint e, recording what the request's credential
// lookup established (v, nil when the session was trusted).
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request, e *endpointEntry, v *verified) *session {
	id := r.Header.Get(sessionHeader)
	if id == "" {
		writeError(w, http.StatusBadRequest, store.CodeInvalidArgument, "Mcp-Session-Id header required")
		return nil
	}
	h.mu.Lock()
	s := e.sessions[id]
	if s != nil {
		s.lastSeen = time.Now()
		s.vouch(v)
	}
	h.mu.Unlock()
	if s == nil {
		// Unknown here: never created, closed, or created through another endpoint.
		writeError(w, http.StatusNotFound, store.CodeNotFound, "session not found")
	}
	return s
}

func (h *Handler) servePOST(w http.ResponseWriter, r *http.Request, e *endpointEntry, rec *requestLog, v *verified) {
	if !checkPOST(w, r) || !versionOK(w, r) {
		return
	}
	callID := strconv.FormatUint(h.callSeq.Add(1), 36)
	r.Header.Set(callHeader, callID)
	h.calls.Store(callID, rec)
	defer h.calls.Delete(callID)

	if r.Header.Get(sessionHeader) == "" {
		if initializeOrRefuse(w, r) {
			h.newSession(w, r, e, v)
		}
		return
	}
	if s := h.lookup(w, r, e, v); s != nil {
		s.transport.ServeHTTP(w, r)
	}
}

// newSession starts a session for a POST without a session id (normally initialize).
func (h *Handler) newSession(w http.ResponseWriter, r *http.Request, e *endpointEntry, v *verified) {
	if pv := r.Header.Get(versionHeader); pv >= newProtocol {
		refuseNewProtocol(w, r, pv)
		return
	}
	if !h.admitSession(w, e) { // sessionlimit.go
		return
	}
	id := rand.Text()
	// A tool call is answered as one application/json response rather than a one-event
	// stream: both sides parse it with less work (see server/third_party/go-sdk/SWITCHBOARD.md).
	// Notifications (the doorbell) take the standalone GET stream.
	t := &mcp.StreamableServerTransport{SessionID: id, JSONResponse: true}
	s := &session{id: id, entry: e, transport: t, lastSeen: time.Now()}
	ct := &channelTransport{inner: t, stream: &s.stream}
	ct.onClose = func() { h.dropSession(s) }
	ss, err := e.srv.Connect(r.Context(), ct, nil)
	if err != nil {
		h.log.Error("session connect failed", "endpoint_id", e.ep.ID, "err", err)
		writeError(w, http.StatusInternalServerError, store.CodeInternal, "internal error")
		return
	}
	s.ss = ss
	h.mu.Lock()
	if e.revoked || h.closing {
		h.mu.Unlock()
		_ = ss.Close()
		writeError(w, http.StatusNotFound, store.CodeNotFound, "session not found")
		return
	}
	if e.streams() >= h.o.MaxSessions { // the authoritative check (sessionlimit.go)
		h.mu.Unlock()
		_ = ss.Close()
		h.tooManySessions(w)
		return
	}
	e.sessions[id] = s
	h.sessions[id] = s
	s.vouch(v)
	if h.o.Bell != nil {
		s.bell = h.o.Bell.Attach(e.ep.ID, id, ct.notify)
	}
	h.mu.Unlock()
	h.m.Sessions.Inc()

	t.ServeHTTP(w, r)
	if ss.InitializeParams() == nil {
		_ = ss.Close() // not an initialize, or it failed: nobody can address this session
	}
}

// refuseNewProtocol answers a SEP-2575 (sessionless) request such as server/discover with the
// JSON-RPC error the SDK uses, so clients fall back to initialize without a session being made.
func refuseNewProtocol(w http.ResponseWriter, r *http.Request, v string) {
	body, _ := io.ReadAll(r.Body)
	var id jsonrpc.ID
	if msg, err := jsonrpc.DecodeMessage(body); err == nil {
		if req, ok := msg.(*jsonrpc.Request); ok {
			id = req.ID
		}
	}
	var legacy []string
	for _, pv := range mcp.SupportedProtocolVersions() {
		if pv < newProtocol {
			legacy = append(legacy, pv)
		}
	}
	data, _ := json.Marshal(mcp.UnsupportedProtocolVersionData{Supported: legacy, Requested: v})
	out, _ := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{
		Code: mcp.CodeUnsupportedProtocolVersion, Message: "this server is stateful: use initialize", Data: data,
	}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(out)
}

// dropSession forgets a closed session (called once, when its connection closes).
func (h *Handler) dropSession(s *session) {
	h.mu.Lock()
	e := s.entry
	removed := e.sessions[s.id] == s
	if removed {
		delete(e.sessions, s.id)
		delete(h.sessions, s.id)
	}
	h.mu.Unlock()
	if removed {
		h.m.Sessions.Dec()
	}
	if s.bell != nil {
		s.bell.Close()
	}
	if es := s.stream.Load(); es != nil {
		es.close()
	}
}

// serveGET serves the session's standalone SSE stream, which carries the doorbell, until the
// client leaves, the session ends or the credential it was opened with expires.
func (h *Handler) serveGET(w http.ResponseWriter, r *http.Request, e *endpointEntry, v *verified, expires time.Time) {
	if _, stream := accepts(r); !stream {
		writeError(w, http.StatusBadRequest, store.CodeInvalidArgument, "Accept must include text/event-stream")
		return
	}
	if !versionOK(w, r) {
		return
	}
	s := h.lookup(w, r, e, v)
	if s == nil {
		return
	}
	if h.serveStream(w, r, s, expires) {
		return
	}
	// The SDK's stream ends at the expiry too: it has no next request to be refused on, and the
	// client opens another with its refreshed token.
	if !expires.IsZero() {
		ctx, cancel := context.WithDeadline(r.Context(), expires)
		defer cancel()
		r = r.WithContext(ctx)
	}
	sw := &streamWriter{ResponseWriter: w, onOpen: func() {
		h.mu.Lock()
		s.streams++ // an idle session with an open stream is kept
		h.mu.Unlock()
		if s.bell != nil {
			s.bell.StreamOpened() // rings the new stream for the oldest pending todos
		}
	}}
	s.transport.ServeHTTP(sw, r)
	if sw.opened {
		h.streamClosed(s)
	}
}

// streamClosed records the end of an open GET stream of s; the session's idle time starts now.
func (h *Handler) streamClosed(s *session) {
	h.mu.Lock()
	s.streams--
	s.lastSeen = time.Now()
	h.mu.Unlock()
	if s.bell != nil {
		s.bell.StreamClosed()
	}
}

// streamWriter notices when the SDK accepts a GET stream: it writes the 200 header while it
// holds the stream, so anything written to the session after this point reaches the stream.
type streamWriter struct {
	http.ResponseWriter
	onOpen  func()
	written bool // header sent
	opened  bool // header was 200
}

func (w *streamWriter) WriteHeader(code int) {
	if w.written {
		return
	}
	w.written = true
	w.ResponseWriter.WriteHeader(code)
	if code == http.StatusOK {
		w.opened = true
		w.onOpen()
	}
}

func (w *streamWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *streamWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (h *Handler) serveDELETE(w http.ResponseWriter, r *http.Request, e *endpointEntry) {
	s := h.lookup(w, r, e, nil)
	if s == nil {
		return
	}
	h.closeSession(s)
	w.WriteHeader(http.StatusNoContent)
}

// sweep closes idle sessions and forgets idle endpoints until Close.
func (h *Handler) sweep() {
	defer close(h.done)
	every := min(h.o.SessionIdle/4, time.Minute)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case now := <-tick.C:
			var idle []*session
			h.mu.Lock()
			for id, e := range h.entries {
				for _, s := range e.sessions {
					if s.streams == 0 && now.Sub(s.lastSeen) > h.o.SessionIdle {
						idle = append(idle, s)
					}
				}
				if e.refs == 0 && e.streams() == 0 && now.Sub(e.lastUsed) > entryIdleAfter {
					delete(h.entries, id)
				}
			}
			// Long after any credential lookup that could have raced the revocation.
			for id, at := range h.revoked {
				if now.Sub(at) > entryIdleAfter {
					delete(h.revoked, id)
				}
			}
			h.mu.Unlock()
			for _, s := range idle {
				h.closeSession(s)
			}
		}
	}
}
