package mcpapi

// Queues as MCP resources: a doorbell every client understands. Each granted queue is one
// resource, switchboard://{slug}/queues/{queue} (the slug makes it the endpoint's own: the
// mcp.Server, and so the SDK's table of subscriptions, is shared by the endpoints with the same
// allowlist). resources/read returns the queue's counts and its oldest claimable todos
// (switchboard.queue_resource). A subscriber, by resources/subscribe on a 2025 session or by
// resourceSubscriptions on a 2026-07-28 subscriptions/listen, gets
// notifications/resources/updated whenever the doorbell finds work claimable in the queue (a
// new todo, a retry that came due, an expired lease), coalesced per doorbell window. The SDK
// keeps the subscriptions and sends the notifications (Server.ResourceUpdated); this file
// lists, reads, checks that a subscription names the caller's own queue, and coalesces.

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/store"
)

const resourceMIME = "application/json"

// queueURI is the resource of a queue of an endpoint.
func queueURI(slug, queue string) string {
	return "switchboard://" + url.PathEscape(slug) + "/queues/" + url.PathEscape(queue)
}

// queueOf parses a queue resource URI of endpoint ep; false unless it names a granted queue.
func queueOf(ep store.Endpoint, uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, "switchboard://"+url.PathEscape(ep.Slug)+"/queues/")
	if !ok {
		return "", false
	}
	q, err := url.PathUnescape(rest)
	if err != nil || !slices.Contains(ep.Queues, q) {
		return "", false
	}
	return q, true
}

func unknownResource(uri string) error {
	return &jsonrpc.Error{Code: mcp.CodeResourceNotFound, Message: fmt.Sprintf("no such resource: %q", uri)}
}

// serveResources answers resources/list and resources/read from the database, and checks
// that resources/subscribe and a listen's resourceSubscriptions name the caller's own queues.
func (h *Handler) serveResources(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "resources/list", "resources/read", "resources/subscribe", "resources/unsubscribe", listenMethod:
		default:
			return next(ctx, method, req)
		}
		e := entryFor(req.GetExtra())
		if e == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "session not found"}
		}
		switch r := req.(type) {
		case *mcp.ListResourcesRequest:
			queues, err := h.o.Store.QueueResources(ctx, e.ep.ID)
			if err != nil {
				return nil, h.resourceError(e, err)
			}
			res := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
			for _, q := range queues {
				res.Resources = append(res.Resources, &mcp.Resource{
					URI: queueURI(e.ep.Slug, q), Name: q, Title: "Queue " + q, MIMEType: resourceMIME,
					Description: "Counts of live todos and the oldest claimable ones (list_todos rows). Subscribe to hear when work becomes claimable.",
				})
			}
			return res, nil
		case *mcp.ReadResourceRequest:
			q, ok := queueOf(e.ep, r.Params.URI)
			if !ok {
				return nil, unknownResource(r.Params.URI)
			}
			raw, err := h.o.Store.QueueResource(ctx, e.ep.ID, q)
			if err != nil {
				return nil, h.resourceError(e, err)
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
				{URI: r.Params.URI, MIMEType: resourceMIME, Text: string(raw)}}}, nil
		case *mcp.SubscribeRequest:
			if _, ok := queueOf(e.ep, r.Params.URI); !ok {
				return nil, unknownResource(r.Params.URI)
			}
		case *mcp.SubscriptionsListenRequest:
			if r.Params != nil && r.Params.Notifications != nil {
				for _, uri := range r.Params.Notifications.ResourceSubscriptions {
					if _, ok := queueOf(e.ep, uri); !ok {
						return nil, unknownResource(uri)
					}
				}
			}
		}
		return next(ctx, method, req)
	}
}

// resourceError turns a store error into a JSON-RPC error with a stable message.
func (h *Handler) resourceError(e *endpointEntry, err error) error {
	serr := store.Classify(err)
	if serr.Code == store.CodeInternal {
		h.log.Error("resource read failed", "endpoint_id", e.ep.ID, "err", serr.Unwrap())
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error"}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: serr.Code + ": " + serr.Message}
}

// subscribed accepts a subscription the middleware checked (the SDK keeps the table).
func subscribed(context.Context, *mcp.SubscribeRequest) error     { return nil }
func unsubscribed(context.Context, *mcp.UnsubscribeRequest) error { return nil }

// updates coalesces resources/updated per queue: the first ready todo of a quiet queue is
// announced at once, those after it within the doorbell window once at its end.
type updates struct {
	h      *Handler
	window func() time.Duration

	mu      sync.Mutex
	pending map[updateKey]bool // queue in its window → another update is due at its end
}

type updateKey struct{ endpoint, queue string }

// ready is the doorbell's hook (doorbell.Bell.OnReady): work became claimable in a queue.
// Called under the bell's lock, so it only takes its own.
func (u *updates) ready(endpointID, queue string) {
	k := updateKey{endpointID, queue}
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, open := u.pending[k]; open {
		u.pending[k] = true
		return
	}
	u.pending[k] = false
	go func() { // off the bell's lock: Window takes it
		time.AfterFunc(u.window(), func() { u.windowEnd(k) })
		u.h.resourceUpdated(k)
	}()
}

func (u *updates) windowEnd(k updateKey) {
	d := u.window() // before u.mu: the bell calls ready with its lock held, so never the reverse
	u.mu.Lock()
	again := u.pending[k]
	if again {
		u.pending[k] = false
		time.AfterFunc(d, func() { u.windowEnd(k) })
	} else {
		delete(u.pending, k)
	}
	u.mu.Unlock()
	if again {
		u.h.resourceUpdated(k)
	}
}

// resourceUpdated tells the queue's subscribers (sessions and listen streams) through the SDK.
func (h *Handler) resourceUpdated(k updateKey) {
	h.mu.Lock()
	e := h.entries[k.endpoint]
	h.mu.Unlock()
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: queueURI(e.ep.Slug, k.queue)})
}
