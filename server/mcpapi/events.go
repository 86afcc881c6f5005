package mcpapi

// MCP Events (SEP-3415, docs/events.md) on 2026-07-28: events/list, events/poll,
// events/subscribe and events/unsubscribe, each one store call (db/code/events.sql) — plus, for
// a subscribe to an unverified URL, the signed verification challenge (server/events). On a
// 2025 session every events/* method is -32601, as for a server without the extension.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/events"
	"switchboard/server/store"
)

const eventsExtension = "io.modelcontextprotocol/events"

// The SEP's error codes (its Error Handling table).
const (
	codeNotFound          = -32023
	codeForbidden         = -32024
	codeResourceExhausted = -32025
	codeUnsupported       = -32026
	codeCallbackEndpoint  = -32027
	eventsMethodPrefix    = "events/"
	eventsVerifiedMessage = "CallbackEndpointError"
)

var eventsMethods = []string{"events/list", "events/poll", "events/stream", "events/subscribe", "events/unsubscribe"}

// eventsParams are the params of every events/* request (each uses its part).
type eventsParams struct {
	mcp.ParamsBase
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Cursor    *string         `json:"cursor,omitempty"`
	MaxEvents *int            `json:"maxEvents,omitempty"`
	MaxAgeMs  *int64          `json:"maxAgeMs,omitempty"`
	TTLMs     json.RawMessage `json:"ttlMs,omitempty"` // absent: default; null: no expiry asked
	Delivery  *struct {
		Mode   string `json:"mode"`
		URL    string `json:"url"`
		Secret string `json:"secret"`
	} `json:"delivery,omitempty"`
}

// eventsResult is a result the database wrote, with the SEP's resultType.
type eventsResult struct {
	mcp.ResultBase
	raw json.RawMessage
}

func (r *eventsResult) MarshalJSON() ([]byte, error) {
	raw := bytes.TrimSpace(r.raw)
	if len(raw) < 2 || raw[0] != '{' {
		return nil, errors.New("events result is not an object")
	}
	var b bytes.Buffer
	b.WriteString(`{"resultType":"complete"`)
	if inner := bytes.TrimSpace(raw[1 : len(raw)-1]); len(inner) > 0 {
		b.WriteByte(',')
		b.Write(inner)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// addEvents registers the extension's methods, which serveEvents answers. serverFor declares
// it (under extensions, and at the top-level place @ai-sdk/mcp 2.0.99 reads: go-sdk patch 08).
func addEvents(srv *mcp.Server) {
	for _, m := range eventsMethods {
		_ = mcp.AddReceivingCustomMethod(srv, m, func(context.Context, *mcp.ServerSession, *eventsParams) (*eventsResult, error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error"} // served by serveEvents
		})
	}
}

// without2025Events hides the extension from a 2025 initialize: those sessions are not served it.
func without2025Events(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if ir, ok := res.(*mcp.InitializeResult); ok && method == "initialize" && ir.Capabilities != nil {
			c := *ir.Capabilities
			c.Events = nil
			c.Extensions = nil
			for k, v := range ir.Capabilities.Extensions {
				if k != eventsExtension {
					if c.Extensions == nil {
						c.Extensions = map[string]any{}
					}
					c.Extensions[k] = v
				}
			}
			ir.Capabilities = &c
		}
		return res, err
	}
}

// serveEvents answers the events/* methods.
func (h *Handler) serveEvents(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !strings.HasPrefix(method, eventsMethodPrefix) {
			return next(ctx, method, req)
		}
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if ss == nil || ss.ID() != "" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + method + " (MCP Events is served on protocol 2026-07-28)"}
		}
		rq := requestOf(req.GetExtra())
		if rq == nil || rq.entry == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "session not found"}
		}
		e := rq.entry
		// The endpoint's own bucket (the tools' is not spent): the tools' stable code, under
		// the SEP's ResourceExhausted.
		if serr := spend(e.buckets.events); serr != nil {
			return nil, &jsonrpc.Error{Code: codeResourceExhausted, Message: serr.Code + ": " + serr.Message,
				Data: json.RawMessage(`{"limit":"SWITCHBOARD_EVENTS_RATE"}`)}
		}
		p, _ := req.GetParams().(*eventsParams)
		if p == nil {
			p = &eventsParams{}
		}
		raw, err := h.events(ctx, ss, e, rq.cred, method, p)
		if err != nil {
			return nil, h.eventsError(e, err)
		}
		return &eventsResult{raw: raw}, nil
	}
}

func (h *Handler) events(ctx context.Context, ss *mcp.ServerSession, e *endpointEntry, cred []byte, method string, p *eventsParams) ([]byte, error) {
	st, ep := h.o.Store, e.ep.ID
	args := p.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	switch method {
	case "events/list":
		types, err := st.EventsTypes(ctx, ep)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]json.RawMessage{"events": types})
	case "events/poll":
		return st.EventsPoll(ctx, ep, p.Name, args, p.Cursor, p.MaxEvents, p.MaxAgeMs)
	case streamMethod:
		return h.eventsStream(ctx, ss, e, p, args)
	case "events/unsubscribe":
		if p.Delivery == nil || p.Delivery.URL == "" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "delivery.url is required"}
		}
		return st.EventsUnsubscribe(ctx, ep, p.Name, args, p.Delivery.URL)
	}
	// events/subscribe
	d := p.Delivery
	if d == nil || d.URL == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "delivery.url and delivery.secret are required"}
	}
	if d.Mode != "" && d.Mode != "webhook" {
		return nil, &jsonrpc.Error{Code: codeUnsupported, Message: "Unsupported", Data: json.RawMessage(`{"feature":"deliveryMode"}`)}
	}
	if h.o.Callbacks == nil {
		return nil, &jsonrpc.Error{Code: codeUnsupported, Message: "Unsupported", Data: json.RawMessage(`{"feature":"deliveryMode","value":"webhook"}`)}
	}
	if err := h.o.Callbacks.CheckURL(d.URL); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	var ttl *int64
	if t := bytes.TrimSpace(p.TTLMs); len(t) > 0 {
		var v int64 = -1
		if string(t) != "null" {
			if err := json.Unmarshal(t, &v); err != nil || v <= 0 {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "ttlMs must be a positive integer or null"}
			}
		}
		ttl = &v
	}
	out, err := st.EventsSubscribe(ctx, ep, p.Name, args, d.URL, d.Secret, p.Cursor, p.MaxAgeMs, ttl, false, cred)
	if err != nil {
		return nil, err
	}
	var pending struct {
		Verify bool   `json:"verify"`
		ID     string `json:"id"`
	}
	if json.Unmarshal(out, &pending) != nil || !pending.Verify {
		return out, nil
	}
	if err := h.o.Callbacks.Verify(ctx, d.URL, pending.ID, d.Secret); err != nil {
		return nil, err
	}
	return st.EventsSubscribe(ctx, ep, p.Name, args, d.URL, d.Secret, p.Cursor, p.MaxAgeMs, ttl, true, cred)
}

// eventsError maps refusals to the SEP's codes; nothing of the receiver's answer and no SQL.
func (h *Handler) eventsError(e *endpointEntry, err error) error {
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return je
	}
	var ce *events.CallbackError
	if errors.As(err, &ce) {
		data, _ := json.Marshal(map[string]string{"reason": ce.Reason})
		return &jsonrpc.Error{Code: codeCallbackEndpoint, Message: eventsVerifiedMessage, Data: data}
	}
	serr := store.Classify(err)
	switch serr.Code {
	case store.CodeInvalidArgument:
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: serr.Message}
	case store.CodeNotFound:
		return &jsonrpc.Error{Code: codeNotFound, Message: "NotFound: " + serr.Message}
	case store.CodeForbidden:
		return &jsonrpc.Error{Code: codeForbidden, Message: "Forbidden: " + serr.Message}
	}
	h.log.Error("events request failed", "endpoint_id", e.ep.ID, "err", serr.Unwrap())
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error"}
}

// events/stream (push): a long-lived 2026-07-28 request, served like a listen stream (counted
// against the endpoint's streams, ended by revocation, rotation, credential expiry and
// shutdown: serveListen). It confirms with notifications/events/active, then polls the same
// SQL function as events/poll and sends each occurrence as notifications/events/event, with a
// heartbeat carrying the cursor. Any replica serves it: the events are in PostgreSQL.
// Revocation and rotation end it with notifications/events/terminated (the client drops the
// subscription); expiry and shutdown just close it (the client reconnects with its cursor).
const (
	streamMethod    = "events/stream"
	streamPoll      = 500 * time.Millisecond
	streamHeartbeat = 25 * time.Second
	subscriptionKey = "io.modelcontextprotocol/subscriptionId"
)

type streamIDKey struct{}

// withStreamID reads the JSON-RPC id of an events/stream request (it names the subscription in
// every notification) and leaves the body as it was for the SDK.
func withStreamID(r *http.Request) *http.Request {
	if r.Body == nil {
		return r
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return r
	}
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &msg) != nil || len(msg.ID) == 0 {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), streamIDKey{}, msg.ID))
}

func (h *Handler) eventsStream(ctx context.Context, ss *mcp.ServerSession, e *endpointEntry, p *eventsParams, args json.RawMessage) ([]byte, error) {
	st, ep := h.o.Store, e.ep.ID
	subID, _ := ctx.Value(streamIDKey{}).(json.RawMessage)
	if subID == nil {
		subID = json.RawMessage(`null`)
	}
	meta := map[string]any{subscriptionKey: subID}
	type pollResult struct {
		Events    []map[string]any `json:"events"`
		Cursor    string           `json:"cursor"`
		Truncated bool             `json:"truncated"`
		HasMore   bool             `json:"hasMore"`
	}
	// maxAgeMs floors the replay from the client's cursor: the first poll only (later ones
	// read from the stream's own cursor, and must not drop an event that waited on a
	// transaction in flight for longer).
	maxAge := p.MaxAgeMs
	poll := func(cursor *string) (*pollResult, error) {
		raw, err := st.EventsPoll(ctx, ep, p.Name, args, cursor, nil, maxAge)
		maxAge = nil
		if err != nil {
			return nil, err
		}
		var r pollResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, err
		}
		return &r, nil
	}
	// The first poll checks the subscription: a refusal is the request's error, no stream.
	first, err := poll(p.Cursor)
	if err != nil {
		return nil, err
	}
	if err := ss.Notify(ctx, "notifications/events/active", map[string]any{
		"cursor": first.Cursor, "truncated": first.Truncated, "_meta": meta}); err != nil {
		return []byte(`{}`), nil
	}
	send := func(r *pollResult) error {
		for i, ev := range r.Events {
			if i == len(r.Events)-1 {
				ev["cursor"] = r.Cursor // the position after the batch: safe once all of it is out
			}
			ev["_meta"] = meta
			if err := ss.Notify(ctx, "notifications/events/event", ev); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(first); err != nil {
		return []byte(`{}`), nil
	}
	// terminated says why the server ends the stream, then the final result (the SEP's
	// StreamEventsResult) closes it.
	terminated := func(reason string) ([]byte, error) {
		_ = ss.Notify(ctx, "notifications/events/terminated", map[string]any{
			"error": map[string]any{"code": codeForbidden, "message": "Forbidden", "data": map[string]string{"reason": reason}},
			"_meta": meta})
		return json.Marshal(map[string]any{"_meta": meta})
	}
	var ending <-chan struct{}
	se, _ := ctx.Value(streamEndKey{}).(*streamEnd)
	if se != nil {
		ending = se.done
	}
	cursor := first.Cursor
	tick := time.NewTicker(streamPoll)
	defer tick.Stop()
	beat := time.NewTicker(streamHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ending:
			return terminated(se.reason) // revoked or rotated (serveListen)
		case <-ctx.Done():
			return []byte(`{}`), nil // expired, shutting down, or the client left
		case <-beat.C:
			if ss.Notify(ctx, "notifications/events/heartbeat", map[string]any{"cursor": cursor, "_meta": meta}) != nil {
				return []byte(`{}`), nil
			}
		case <-tick.C:
			for {
				r, err := poll(&cursor)
				if err != nil {
					if ctx.Err() != nil {
						return []byte(`{}`), nil
					}
					if store.Classify(err).Code == store.CodeForbidden {
						return terminated("Access revoked") // before this server heard of it
					}
					return nil, err
				}
				if err := send(r); err != nil {
					return []byte(`{}`), nil
				}
				cursor = r.Cursor
				if !r.HasMore {
					break
				}
			}
		}
	}
}
