package todotools

// claim_next with wait_seconds (and the next option of complete, fail and release). The wait is
// a wake-up only: every attempt is one call of switchboard.claim_next under its usual rules, and
// between attempts the call parks on the doorbell (doorbell.Waiter) holding no database
// connection. It ends with a todo, with {empty: true} when the time is up, the client cancels
// (notifications/cancelled, or its HTTP request ends), the session closes or the server shuts
// down, and with forbidden when the endpoint is revoked.

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"switchboard/server/doorbell"
	"switchboard/server/store"
	"switchboard/server/tool"
)

// progressEvery is the interval of progress notifications to a waiting call that sent a
// progressToken (clients such as the TypeScript SDK can reset their request timeout on them).
var progressEvery = 5 * time.Second

// Reasons in wait_skipped: the call asked to wait but answered at once.
const (
	skipTooMany  = "too_many_waiting_calls" // the endpoint's cap of waiting calls here is reached
	skipEnded    = "shutting_down"          // the session is closing or the server shutting down
	skipDisabled = "waiting_off"            // claim_wait_max_seconds is 0
)

// claimResult is what the loop needs of claim_next's answer.
type claimResult struct {
	Empty bool `json:"empty"`
	Todo  *struct {
		ID string `json:"id"`
	} `json:"todo"`
	Todos []struct { // claim_next with max
		ID string `json:"id"`
	} `json:"todos"`
}

func claimedID(raw json.RawMessage) (id string, empty bool) {
	var r claimResult
	if json.Unmarshal(raw, &r) != nil {
		return "", false // not claim_next's shape: answer it as it is
	}
	if r.Todo != nil {
		return r.Todo.ID, false
	}
	if len(r.Todos) > 0 {
		// A batch: a wake for another of its todos passes on to another waiter, at worst a
		// wake-up that finds nothing, never a lost one.
		return r.Todos[0].ID, false
	}
	return "", r.Empty
}

// laterError is a failure of an attempt after the first (the caller's transition stands).
type laterError struct{ err error }

func (e laterError) Error() string { return e.err.Error() }
func (e laterError) Unwrap() error { return e.err }

// waitFor turns the argument into the wait, clamped to claim_wait_max_seconds; 0 and a
// reason when the call may not wait.
func waitFor(c *tool.Call, seconds *int64) (time.Duration, string) {
	if seconds == nil || *seconds <= 0 {
		return 0, ""
	}
	if c.WaitMax <= 0 {
		return 0, skipDisabled
	}
	return min(time.Duration(*seconds)*time.Second, c.WaitMax), ""
}

// claimWaiting runs first (a claim attempt: claim_next, or the next claim of a finishing call,
// returning claim_next's answer) and, while it finds nothing, waits up to wait for a wake-up and
// tries switchboard.claim_next again. It returns the last answer (with wait_skipped when the
// call could not wait). Errors of attempts after the first are laterError.
func claimWaiting(ctx context.Context, c *tool.Call, o store.NextOptions, wait time.Duration, skip string,
	first func(context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
	var w *doorbell.Waiter
	if wait > 0 && c.Bell == nil && c.Attach != nil {
		bs := c.Attach()
		defer bs.Close()
		c.Bell = bs
	}
	if wait > 0 && c.Bell != nil {
		queue := ""
		if o.Queue != nil {
			queue = *o.Queue
		}
		var err error
		// Registered before the first attempt: a todo committed after it wakes this call.
		w, err = c.Bell.Wait(queue)
		switch {
		case errors.Is(err, doorbell.ErrTooManyWaiting):
			skip = skipTooMany
		case err != nil:
			skip = skipEnded
		}
		if w != nil {
			defer w.Leave()
		}
	}
	if w == nil {
		raw, err := first(ctx)
		if err != nil || skip == "" {
			return raw, err
		}
		if _, empty := claimedID(raw); empty {
			return withField(raw, "wait_skipped", skip), nil
		}
		return raw, nil
	}

	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var tick <-chan time.Time
	if c.Progress != nil {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		tick = t.C
	}
	start := time.Now()
	attempt := first
	for n := 0; ; n++ {
		w.Begin()
		raw, err := attempt(ctx)
		if err != nil {
			if n > 0 {
				err = laterError{err}
			}
			return nil, err // Leave passes the wake on
		}
		id, empty := claimedID(raw)
		if !empty {
			w.After(id)
			return raw, nil
		}
		w.After("")
		attempt = func(ctx context.Context) (json.RawMessage, error) { return c.Store.ClaimNext(ctx, c.Endpoint.ID, o) }
	park:
		for {
			select {
			case <-w.Woken():
				break park
			case <-deadline.C:
				return raw, nil
			case <-ctx.Done():
				return raw, nil // cancelled or gone: nobody reads the answer, it only ends the call
			case <-w.Ended():
				if errors.Is(w.Err(), doorbell.ErrRevoked) {
					return nil, laterError{store.Errorf(store.CodeForbidden, "endpoint is not active")}
				}
				return raw, nil
			case <-tick:
				c.Progress(ctx, time.Since(start).Seconds(), wait.Seconds(), "waiting for a claimable todo")
			}
		}
	}
}

// withField returns the JSON object raw with one more string field.
func withField(raw json.RawMessage, key, value string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	v, _ := json.Marshal(value)
	m[key] = v
	out, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return out
}

// finishWaiting is complete, fail or release with next and a wait: the transition and the
// first claim in one SQL call (switchboard.finish_and_claim_next), then claim_next attempts
// while waiting. The answer is the todo with next as claim_next would answer (or
// {error: "<code>: <message>"} when a claim failed: the transition stands).
func finishWaiting(ctx context.Context, c *tool.Call, op store.Op, in finishIn, o store.NextOptions,
	wait time.Duration, skip string) (json.RawMessage, error) {
	var whole map[string]json.RawMessage
	first := func(ctx context.Context) (json.RawMessage, error) {
		raw, err := c.Store.Finish(ctx, op, c.Endpoint.ID, in.ID, in.Result, in.LeaseToken, &o)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &whole); err != nil {
			return nil, store.Internal(err)
		}
		return whole["next"], nil // {"error": ...} has no empty: answered as it is
	}
	next, err := claimWaiting(ctx, c, o, wait, skip, first)
	if err != nil {
		var later laterError
		if !errors.As(err, &later) {
			return nil, err
		}
		e := store.Classify(later.err)
		if e.Code == store.CodeInternal {
			c.Log.Error("next claim failed", "endpoint_id", c.Endpoint.ID, "err", e.Unwrap())
		}
		next, _ = json.Marshal(map[string]string{"error": e.Code + ": " + e.Message})
	}
	whole["next"] = next
	out, err := json.Marshal(whole)
	if err != nil {
		return nil, store.Internal(err)
	}
	return out, nil
}
