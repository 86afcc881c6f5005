package mcpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/doorbell"
	"switchboard/server/store"
	"switchboard/server/tool"
)

const (
	sessionHeader  = "Mcp-Session-Id"
	versionHeader  = "Mcp-Protocol-Version"
	newProtocol    = "2026-07-28" // SEP-2575: no sessions from this version on (modern.go)
	entryIdleAfter = 10 * time.Minute
)

// endpointEntry is one endpoint's server, sessions and rate limits. Guarded by Handler.mu.
type endpointEntry struct {
	ep       store.Endpoint
	srv      *mcp.Server
	buckets  *buckets
	sessions map[string]*session
	opening  int                  // initialize requests under way, each holding a place under the cap
	listens  int                  // open 2026-07-28 listen streams, capped with the sessions (modern.go)
	open     map[*listen]struct{} // the listens that are set up: closed by Revoke
	refs     int
	lastUsed time.Time
	revoked  bool
}

// streams counts what the per-endpoint cap (Options.MaxSessions) bounds: sessions, the
// initialize requests that may start one, and listen streams. Handler.mu must be held.
func (e *endpointEntry) streams() int { return len(e.sessions) + e.opening + e.listens }

// session is what Switchboard keeps of a 2025 session beside the SDK's: its endpoint, its
// doorbell registration, its GET stream and idle time (sweep), and what the database confirmed
// of its credential (trustedSession). All but id, entry, ss and bell are guarded by Handler.mu.
type session struct {
	id       string
	entry    *endpointEntry
	ss       *mcp.ServerSession
	bell     *doorbell.Session
	streams  int // open GET streams (0 or 1: the SDK refuses a second)
	lastSeen time.Time
	cred     []byte    // credential hash the database last confirmed for this session
	verified uint64    // the revocation feed's epoch of that confirmation (see trustedSession)
	until    time.Time // an OAuth token's expiry: trusted no longer (zero: an sbk_ credential)
}

// vouch records a database confirmation of the session's credential. h.mu must be held.
func (s *session) vouch(v *verified) {
	if v != nil {
		s.cred, s.verified, s.until = v.hash, v.epoch, v.until
	}
}

// touch finds the live session id of endpoint e for a request naming it, and records the
// request's credential lookup (v) and activity. Nil: unknown here (the SDK answers 404 or 403).
func (h *Handler) touch(id string, e *endpointEntry, v *verified) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[id]
	if s == nil || s.entry != e {
		return nil
	}
	s.lastSeen = time.Now()
	s.vouch(v)
	return s
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
	a := h.serverFor(ep.Verbs)
	// The entry keeps the allowlist's one copy of its verbs rather than the lookup's: about
	// 0.8 KB an endpoint, for a list only serverFor reads.
	ep.Verbs = a.verbs
	return &endpointEntry{ep: ep, srv: a.srv, buckets: newBuckets(h.o.Limits), sessions: map[string]*session{}, open: map[*listen]struct{}{}}
}

// allowlist is one mcp.Server with exactly the tools of some allowlist, and those verbs.
type allowlist struct {
	srv   *mcp.Server
	verbs []string // the registered tools' names, in registration order
}

// serverFor returns the mcp.Server with exactly the allowlisted tools, shared by every endpoint
// with the same allowlist: building one (its tools' schemas) allocated about 150 KB and kept
// several KB, per endpoint. A call's endpoint is its session's (entryOf). The map holds one
// server per distinct allowlist vended. h.mu must be held.
func (h *Handler) serverFor(verbs []string) *allowlist {
	var key strings.Builder
	var tools []*tool.Registered
	var names []string
	for _, t := range h.o.Tools.Tools() {
		if slices.Contains(verbs, t.Name) {
			tools = append(tools, t)
			names = append(names, t.Name)
			key.WriteString(t.Name)
			key.WriteByte(',')
		}
	}
	if a := h.servers[key.String()]; a != nil {
		return a
	}
	caps := &mcp.ServerCapabilities{
		Experimental: map[string]any{channelCap: map[string]any{}},
		Tools:        &mcp.ToolCapabilities{ListChanged: true},
		Resources:    &mcp.ResourceCapabilities{Subscribe: true},
	}
	caps.AddExtension(eventsExtension, nil)
	caps.Events = &mcp.EventsCapabilities{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "switchboard", Version: h.o.Version}, &mcp.ServerOptions{
		Instructions:       Instructions,
		Capabilities:       caps,
		SubscribeHandler:   subscribed,
		UnsubscribeHandler: unsubscribed,
		SetCacheable:       cacheable,
	})
	allowed := map[string]bool{}
	for _, t := range tools {
		allowed[t.Name] = true
		srv.AddTool(t.MCP(), h.toolHandler(t))
	}
	addEvents(srv)
	srv.AddReceivingMiddleware(h.bindSession, h.forbidOutsideAllowlist(allowed), undeclared, h.serveResources, h.serveListenChannel,
		without2025Events, h.serveEvents)
	srv.AddSendingMiddleware(h.afterAck)
	a := &allowlist{srv: srv, verbs: names}
	h.servers[key.String()] = a
	return a
}

// bindSession records a 2025 session once its initialize succeeded: its endpoint is the
// request's, it may be rung by the doorbell, and it takes the place its initialize request held
// under the endpoint's cap (admitSession).
func (h *Handler) bindSession(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		rq := requestOf(req.GetExtra())
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if method != "initialize" || err != nil || rq == nil || ss == nil || ss.ID() == "" {
			return res, err
		}
		e := rq.entry
		s := &session{id: ss.ID(), entry: e, ss: ss, lastSeen: time.Now()}
		h.mu.Lock()
		if rq.reserved {
			rq.reserved = false
			e.opening--
		}
		if e.revoked || h.closing {
			h.mu.Unlock()
			go ss.Close() // after this answer: Close waits for the session's requests
			return res, err
		}
		s.vouch(rq.v)
		e.sessions[s.id] = s
		h.sessions[s.id] = s
		if h.o.Bell != nil {
			s.bell = h.o.Bell.Attach(e.ep.ID, s.id, channelSender(ss))
		}
		h.mu.Unlock()
		h.m.Sessions.Inc()
		return res, err
	}
}

// channelSender writes the doorbell's notification on a session (a doorbell.Sender). The SDK
// sends no notification of an experimental capability by itself: ServerSession.Notify is the
// one hook added to it (server/third_party/go-sdk/SWITCHBOARD.md). The bell's context is
// detached from every request, so the message takes the session's GET stream (2025) or its
// listen stream (2026-07-28).
func channelSender(ss *mcp.ServerSession) doorbell.Sender {
	return func(ctx context.Context, p doorbell.Params) error {
		return ss.Notify(ctx, doorbell.Method, p)
	}
}

// entryFor is the endpoint entry of any request the SDK dispatches: its HTTP request's, which
// for a 2025 session is the session's (the SDK serves a session only to its endpoint's
// credentials: TokenInfo.UserID).
func entryFor(extra *mcp.RequestExtra) *endpointEntry {
	if rq := requestOf(extra); rq != nil {
		return rq.entry
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
			if !ok || allowed[call.Params.Name] || !slices.Contains(tool.Vocabulary, call.Params.Name) {
				return next(ctx, method, req)
			}
			e := entryFor(call.Extra)
			if e == nil {
				return errorResult(errGone), nil
			}
			serr := store.Errorf(store.CodeForbidden, "the verb %s is not in this endpoint's allowlist", call.Params.Name)
			h.account(requestOf(call.Extra), e, call.Params.Name, serr, time.Now())
			return errorResult(serr), nil
		}
	}
}

// toolHandler wraps a tool's Run: rate limit, validation, timeout, error shape, accounting.
func (h *Handler) toolHandler(t *tool.Registered) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		h.m.ToolCallsInFlight.Inc()
		defer h.m.ToolCallsInFlight.Dec()
		e := entryFor(req.Extra)
		if e == nil {
			return errorResult(errGone), nil
		}
		rec := requestOf(req.Extra)
		var out json.RawMessage
		bs := h.bellOf(req)
		bs.Called() // a session that calls tools is draining its queue (doorbell again.go)
		serr := e.buckets.take(t.Webhook)
		if serr == nil {
			args, verr := t.Validate(req.Params.Arguments)
			if verr != nil {
				serr = verr
			} else {
				call := &tool.Call{Endpoint: e.ep, Store: h.o.Store, Log: h.log, BaseURL: h.o.BaseURL}
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

// account counts a tool call, logs internal failures, and fills the request log line.
func (h *Handler) account(rec *request, e *endpointEntry, verb string, serr *store.Error, start time.Time) {
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

// okResult is a successful tool result: the JSON as structured content and as text.
func okResult(out json.RawMessage) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(out)}},
		StructuredContent: out,
	}
}

// errorResult is a tool failure: isError and one text "<code>: <message>".
func errorResult(e *store.Error) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: e.Code + ": " + e.Message}},
	}
}

// dropSession forgets a closed session.
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
}

// closeSession ends the session's waiting calls, then closes it and forgets it:
// ServerSession.Close waits for in-flight calls, and a waiting call would hold it for up to
// claim_wait_max_seconds. Its GET stream ends with it.
func (h *Handler) closeSession(s *session) {
	if s.bell != nil {
		s.bell.Close()
	}
	_ = s.ss.Close()
	h.dropSession(s)
}

// streamOpened records an accepted GET stream of s: an idle session with an open stream is
// kept, and the doorbell rings the stream for the oldest pending todos.
func (h *Handler) streamOpened(s *session) {
	h.mu.Lock()
	s.streams++
	h.mu.Unlock()
	if s.bell != nil {
		s.bell.StreamOpened()
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
