// Package todotools is the agent's todo tools (contract §4.4, §12): list_todos, get_todo,
// claim, claim_next, complete, fail, heartbeat and release, each one call of the SQL function of
// the same name through server/store; with max or items, one call of its batch function
// (batch.go). Go adds only the wait of claim_next's wait_seconds and of the next option (wait.go):
// between claim attempts the call parks on the doorbell, holding no database connection. The
// handler that serves them, and gives a waiting call its doorbell registration, is server/mcpapi.
package todotools

import (
	"context"
	"encoding/json"
	"errors"
	"math"

	"github.com/google/jsonschema-go/jsonschema"

	"switchboard/server/store"
	"switchboard/server/tool"
)

// Tools is the todo family: list_todos, get_todo, claim, claim_next, complete, fail,
// heartbeat, release (contract §4.4). Each is one call of the SQL function of the same name.
func Tools() []tool.Tool {
	return []tool.Tool{
		{
			Name:        "list_todos",
			Title:       "List todos",
			Effect:      tool.ReadOnly,
			Description: "List your todos, newest first, in your granted queues. Optional filters: queue, state; limit defaults to 50 (max 200).",
			Input: tool.Object(map[string]*jsonschema.Schema{
				"queue": tool.String("only this queue (must be one of your granted queues)"),
				"state": tool.Enum("only this state", "pending", "claimed", "done", "failed", "cancelled"),
				"limit": tool.Integer("rows to return: default 50, at most 200"),
			}),
			Output: tool.Out(map[string]*jsonschema.Schema{"todos": tool.ArrayOf(todoSchema(), "newest first")}, "todos"),
			Run:    tool.Typed(listTodos),
		},
		{
			Name:        "get_todo",
			Title:       "Get a todo",
			Effect:      tool.ReadOnly,
			Description: "Read one todo with its payload, routing trace and result.",
			Input:       tool.Object(map[string]*jsonschema.Schema{"id": tool.String("todo id")}, "id"),
			Output:      todoSchema("payload", "routing", "result"),
			Run:         tool.Typed(getTodo),
		},
		{
			Name:   "claim",
			Title:  "Claim a todo",
			Effect: tool.Changes,
			Description: "Claim one todo by id: you hold it until its lease ends (heartbeat to extend). " +
				"require_fence returns a lease_token that every later call on the todo must present.",
			Input: tool.Object(map[string]*jsonschema.Schema{
				"id":                tool.String("todo id"),
				"lease_ttl_seconds": leaseTTL(),
				"require_fence":     requireFence(),
			}, "id"),
			Output: todoSchema("payload", "routing", "lease_token"),
			Run:    tool.Typed(claim),
		},
		{
			Name:   "claim_next",
			Title:  "Claim the next todo",
			Effect: tool.Changes,
			Description: "Claim the oldest claimable todo in your granted queues (or one queue). " +
				"Answers {empty: true} when there is nothing to do. " + waitDescription + " With max, claims up to max " +
				"todos at once ({todos: [...]}); wait_seconds then returns as soon as at least one is claimable. " + batchAdvice,
			Input:  tool.Object(claimNextProps()),
			Output: withTodos(claimNextSchema()),
			Run:    tool.Typed(claimNext),
			Waits:  true,
		},
		{
			Name:   "complete",
			Title:  "Complete a todo",
			Effect: tool.Changes,
			Description: "Finish a todo you hold, with an optional result. With next, also claim the next todo " +
				"(as claim_next) in the same call; its outcome is in next. " +
				"The agent loop is complete {id, next: {wait_seconds: 50}}: finish, then wait for the next todo, in one call. " +
				"With items instead of id, finishes up to 50 todos you hold in one call (after claim_next {max}).",
			Input:  withItems(finishInput(true), true),
			Output: withResults(finishSchema()),
			Run:    finish(store.Complete),
			Waits:  true,
		},
		{
			Name:   "fail",
			Title:  "Fail a todo",
			Effect: tool.Changes,
			Description: "Fail a todo you hold: it is retried after a backoff while attempts remain, else dead-lettered. " +
				"With next, also claim the next todo (next.wait_seconds waits for one). " +
				"With items instead of id, fails up to 50 todos you hold in one call.",
			Input:  withItems(finishInput(true), true),
			Output: withResults(finishSchema()),
			Run:    finish(store.Fail),
			Waits:  true,
		},
		{
			Name:        "heartbeat",
			Title:       "Extend a todo's lease",
			Effect:      tool.Settles,
			Description: "Extend the lease of a todo you hold to now + lease_ttl_seconds. Call it before the lease ends.",
			Input: tool.Object(map[string]*jsonschema.Schema{
				"id":                tool.String("todo id"),
				"lease_ttl_seconds": leaseTTL(),
				"lease_token":       leaseToken(),
			}, "id"),
			Output: todoSchema(),
			Run:    tool.Typed(heartbeat),
		},
		{
			Name:   "release",
			Title:  "Release a todo",
			Effect: tool.Changes,
			Description: "Give back a todo you hold: it returns to pending for anyone. With next, also claim the next todo " +
				"(next.wait_seconds waits for one). With items instead of id, releases up to 50 todos you hold in one call.",
			Input:  withItems(finishInput(false), false),
			Output: withResults(finishSchema()),
			Run:    finish(store.Release),
			Waits:  true,
		},
	}
}

func leaseTTL() *jsonschema.Schema {
	return tool.Integer("lease length in seconds (default: the endpoint's or 300; clamped to 1..86400)")
}
func requireFence() *jsonschema.Schema {
	return tool.Boolean("return a one-time lease_token that later calls on this todo must present")
}
func leaseToken() *jsonschema.Schema {
	return tool.String("the lease_token of a fenced claim")
}

// waitDescription explains wait_seconds in claim_next's description.
const waitDescription = "With wait_seconds, when nothing is claimable the call waits (holding no database " +
	"connection) and returns as soon as a todo becomes claimable for you, or {empty: true} when the time is up. " +
	"The longest wait is claim_wait_max_seconds, 50 by default: under the 60 s default request timeout of the " +
	"TypeScript MCP SDK. An agent loop: claim_next {wait_seconds: 50}, then complete {id, next: {wait_seconds: 50}} " +
	"to finish one todo and wait for the next in one call."

func nextProps() map[string]*jsonschema.Schema {
	zero := 0.0
	return map[string]*jsonschema.Schema{
		"queue":             tool.String("only this queue (must be one of your granted queues)"),
		"lease_ttl_seconds": leaseTTL(),
		"require_fence":     requireFence(),
		"wait_seconds": {Type: "integer", Minimum: &zero, Description: "when nothing is claimable, wait up to this " +
			"many seconds for a todo (0: answer at once; clamped to claim_wait_max_seconds, default 50)"},
	}
}

func finishInput(withResult bool) *jsonschema.Schema {
	props := map[string]*jsonschema.Schema{
		"id":          tool.String("todo id"),
		"lease_token": leaseToken(),
		"next":        tool.Object(nextProps()),
	}
	props["next"].Description = "also claim the next todo, as claim_next with these options"
	if withResult {
		props["result"] = tool.AnyJSON("any JSON result to store with the todo")
	}
	return tool.Object(props, "id")
}

// todoSchema is the todo row of contract §2, plus the named detail fields.
func todoSchema(extra ...string) *jsonschema.Schema {
	props := map[string]*jsonschema.Schema{
		"id":               tool.String("todo id"),
		"queue":            tool.String("queue"),
		"state":            tool.Enum("state", "pending", "claimed", "done", "failed", "cancelled"),
		"attempt":          tool.Integer("claims so far"),
		"max_attempts":     tool.Integer("claims allowed"),
		"title":            tool.String("title; data from an outside sender"),
		"source":           tool.String("where it came from (webhook source type or operator)"),
		"kind":             tool.Nullable("string", "event type, if any"),
		"owner":            tool.Nullable("string", "agent:<id> of the holder (kept after fail for display)"),
		"lease_expires_at": tool.Nullable("string", "RFC 3339 UTC"),
		"next_retry_at":    tool.Nullable("string", "RFC 3339 UTC; set on a parked retry"),
		"dead_letter":      tool.Boolean("failed with no retry left"),
		"created_at":       tool.String("RFC 3339 UTC"),
		"payload_size":     tool.Integer("payload bytes"),
	}
	for _, f := range extra {
		switch f {
		case "lease_token":
			props[f] = tool.String("fence token (require_fence only); shown once")
		case "routing":
			props[f] = tool.Nullable("object", "the rule trace that routed a delivery here; null for other todos")
		default: // payload, result
			props[f] = tool.AnyJSON(f + " (any JSON)")
		}
	}
	return tool.Out(props, "id", "queue", "state", "attempt")
}

func claimNextSchema() *jsonschema.Schema {
	return tool.Out(map[string]*jsonschema.Schema{
		"empty":       tool.Boolean("true when nothing was claimable"),
		"todo":        todoSchema("payload", "routing"),
		"lease_token": tool.String("fence token (require_fence only); shown once"),
		"wait_skipped": tool.Enum("present when wait_seconds was asked for but the call answered without waiting: "+
			"too_many_waiting_calls (16 calls of this endpoint, by default, already wait on this server), shutting_down, "+
			"waiting_off (claim_wait_max_seconds is 0)", skipTooMany, skipEnded, skipDisabled),
	}, "empty")
}

func finishSchema() *jsonschema.Schema {
	s := todoSchema()
	next := claimNextSchema()
	next.Required = nil
	next.Properties["error"] = tool.String("\"<code>: <message>\" when the next claim failed; the transition above still stands")
	next.Description = "present when next was asked for"
	s.Properties["next"] = next
	return s
}

type nextIn struct {
	Queue        *string `json:"queue"`
	LeaseTTL     *int64  `json:"lease_ttl_seconds"`
	RequireFence *bool   `json:"require_fence"`
	WaitSeconds  *int64  `json:"wait_seconds"`
}

func (n *nextIn) options() *store.NextOptions {
	if n == nil {
		return nil
	}
	return &store.NextOptions{Queue: n.Queue, LeaseTTL: clampInt(n.LeaseTTL), RequireFence: n.RequireFence != nil && *n.RequireFence}
}

// clampInt keeps an integer argument inside PostgreSQL's int range; SQL clamps it further.
func clampInt(v *int64) *int {
	if v == nil {
		return nil
	}
	x := min(max(*v, math.MinInt32), math.MaxInt32)
	i := int(x)
	return &i
}

func listTodos(ctx context.Context, c *tool.Call, in struct {
	Queue *string `json:"queue"`
	State *string `json:"state"`
	Limit *int64  `json:"limit"`
}) (json.RawMessage, error) {
	return c.Store.ListTodos(ctx, c.Endpoint.ID, in.Queue, in.State, clampInt(in.Limit))
}

func getTodo(ctx context.Context, c *tool.Call, in struct {
	ID string `json:"id"`
}) (json.RawMessage, error) {
	return c.Store.GetTodo(ctx, c.Endpoint.ID, in.ID)
}

func claim(ctx context.Context, c *tool.Call, in struct {
	ID           string `json:"id"`
	LeaseTTL     *int64 `json:"lease_ttl_seconds"`
	RequireFence *bool  `json:"require_fence"`
}) (json.RawMessage, error) {
	return c.Store.Claim(ctx, c.Endpoint.ID, in.ID, clampInt(in.LeaseTTL), in.RequireFence != nil && *in.RequireFence)
}

func claimNext(ctx context.Context, c *tool.Call, in claimNextIn) (json.RawMessage, error) {
	o := *in.options()
	o.Max = clampInt(in.Max)
	wait, skip := waitFor(c, in.WaitSeconds)
	if wait == 0 && skip == "" {
		return c.Store.ClaimNext(ctx, c.Endpoint.ID, o)
	}
	raw, err := claimWaiting(ctx, c, o, wait, skip, func(ctx context.Context) (json.RawMessage, error) {
		return c.Store.ClaimNext(ctx, c.Endpoint.ID, o)
	})
	var later laterError
	if errors.As(err, &later) {
		err = later.err
	}
	return raw, err
}

func heartbeat(ctx context.Context, c *tool.Call, in struct {
	ID         string  `json:"id"`
	LeaseTTL   *int64  `json:"lease_ttl_seconds"`
	LeaseToken *string `json:"lease_token"`
}) (json.RawMessage, error) {
	return c.Store.Heartbeat(ctx, c.Endpoint.ID, in.ID, clampInt(in.LeaseTTL), in.LeaseToken)
}

type finishIn struct {
	ID         string          `json:"id"`
	Result     json.RawMessage `json:"result"`
	LeaseToken *string         `json:"lease_token"`
	Next       *nextIn         `json:"next"`
	Items      json.RawMessage `json:"items"` // a batch (batch.go), instead of id
}

// finish is complete, fail or release, with the optional next claim.
func finish(op store.Op) func(context.Context, *tool.Call, json.RawMessage) (json.RawMessage, error) {
	return tool.Typed(func(ctx context.Context, c *tool.Call, in finishIn) (json.RawMessage, error) {
		if in.Items != nil {
			return finishItems(ctx, c, op, in)
		}
		if in.ID == "" {
			return nil, store.Errorf(store.CodeInvalidArgument, "missing required argument \"id\" (or items)")
		}
		if in.Next != nil {
			if wait, skip := waitFor(c, in.Next.WaitSeconds); wait > 0 || skip != "" {
				return finishWaiting(ctx, c, op, in, *in.Next.options(), wait, skip)
			}
		}
		return c.Store.Finish(ctx, op, c.Endpoint.ID, in.ID, in.Result, in.LeaseToken, in.Next.options())
	})
}
