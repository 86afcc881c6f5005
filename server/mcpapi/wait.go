package mcpapi

// The handler's side of a waiting call (claim_next's wait_seconds, the next option of complete,
// fail and release; the wait itself is server/todotools' wait.go): the call gets its session's
// doorbell registration, or one of its own on 2026-07-28, the longest wait and progress
// notifications.

import (
	"context"
	"errors"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/doorbell"
	"switchboard/server/tool"
)

// setsLease names the verbs that may set a lease or a retry window, which the doorbell's
// time-based reads then look for (doorbell due.go).
var setsLease = map[string]bool{"claim": true, "claim_next": true, "fail": true, "complete": true, "release": true}

// bellOf is the doorbell's view of the call's session (nil without a doorbell).
func (h *Handler) bellOf(req *mcp.CallToolRequest) *doorbell.Session {
	if req.Session == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.sessions[req.Session.ID()]; s != nil {
		return s.bell
	}
	return nil
}

// prepareWait gives a call of a waiting tool its session's waiter, the longest wait, and
// progress notifications when the request asked for them.
func (h *Handler) prepareWait(call *tool.Call, req *mcp.CallToolRequest, bs *doorbell.Session) {
	if h.o.Bell == nil {
		return
	}
	call.Bell = bs
	call.WaitMax = h.o.Bell.WaitMax()
	if bs == nil {
		// A 2026-07-28 call: no session, so the wait gets a doorbell registration of its own.
		bell, ep, id := h.o.Bell, call.Endpoint.ID, "call-"+strconv.FormatUint(h.callSeq.Add(1), 36)
		call.Attach = func() *doorbell.Session { return bell.Attach(ep, id, noSend) }
	}
	if req.Params == nil || req.Session == nil {
		return
	}
	if tok := req.Params.GetProgressToken(); tok != nil {
		ss := req.Session
		call.Progress = func(ctx context.Context, progress, total float64, message string) {
			_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: tok, Progress: progress, Total: total, Message: message})
		}
	}
}

// noSend is the sender of a registration that only waits: it opens no stream, so it is never rung.
func noSend(context.Context, doorbell.Params) error { return errNoStream }

var errNoStream = errors.New("no stream to ring")
