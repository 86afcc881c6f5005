package todotools

// Batches (contract §12): claim_next with max, and complete, fail and release with items. The
// batch is one SQL call (switchboard.claim_next_many, complete_many, fail_many, release_many):
// an agent pays one model turn and PostgreSQL one statement for up to 50 todos.

import (
	"context"
	"encoding/json"

	"github.com/google/jsonschema-go/jsonschema"

	"switchboard/server/store"
	"switchboard/server/tool"
)

// batchAdvice is what the descriptions tell an agent about batching.
const batchAdvice = "Batch when the todos are small and independent (labelling, triage, short lookups): " +
	"claim_next {max: 10} then one complete {items} for all of them costs two calls instead of twenty. " +
	"Claim one at a time when each todo is long work: the others' leases run while you hold them."

// claimNextProps are claim_next's arguments: next's, and max.
func claimNextProps() map[string]*jsonschema.Schema {
	props := nextProps()
	one, most := 1.0, float64(store.MaxBatch)
	props["max"] = &jsonschema.Schema{Type: "integer", Minimum: &one, Maximum: &most, Description: "claim up to " +
		"this many todos (1-50) in one call; the answer is then {todos: [...]}, each todo with its own lease " +
		"(and lease_token when fenced). Without max: one todo, as {todo}"}
	return props
}

// withTodos documents claim_next's answer with max.
func withTodos(s *jsonschema.Schema) *jsonschema.Schema {
	s.Properties["todos"] = tool.ArrayOf(todoSchema("payload", "routing", "lease_token"),
		"with max: the claimed todos, oldest first, each with its own lease (and lease_token when fenced)")
	return s
}

// withItems adds items to the input of complete, fail or release: id is then no longer
// required (exactly one of id and items, checked at run time).
func withItems(s *jsonschema.Schema, withResult bool) *jsonschema.Schema {
	props := map[string]*jsonschema.Schema{
		"id":          tool.String("todo id"),
		"lease_token": leaseToken(),
	}
	if withResult {
		props["result"] = tool.AnyJSON("any JSON result to store with this todo")
	}
	one, most := 1, store.MaxBatch
	items := tool.ArrayOf(tool.Object(props, "id"), "instead of id: 1-50 todos you hold, each finished on its own "+
		"(one item's refusal does not stop the others); the answer is {results: [...]} in this order. Not with next")
	items.MinItems, items.MaxItems = &one, &most
	s.Properties["items"] = items
	s.Required = nil
	return s
}

// withResults lets the output of complete, fail and release be a batch's too.
func withResults(s *jsonschema.Schema) *jsonschema.Schema {
	s.Properties["results"] = tool.ArrayOf(tool.Out(map[string]*jsonschema.Schema{
		"id":      tool.String("the id as given"),
		"ok":      tool.Boolean("whether this item was done"),
		"todo":    todoSchema(),
		"code":    tool.String("the refusal's code when not ok: not_found, forbidden or conflict"),
		"message": tool.String("the refusal's message when not ok"),
	}, "id", "ok"), "with items: one result per item, in the order given")
	s.Required = nil // a todo, or {results} with items
	return s
}

type claimNextIn struct {
	nextIn
	Max *int64 `json:"max"`
}

// finishItems is complete, fail or release with items.
func finishItems(ctx context.Context, c *tool.Call, op store.Op, in finishIn) (json.RawMessage, error) {
	switch {
	case in.ID != "":
		return nil, store.Errorf(store.CodeInvalidArgument, "give id or items, not both")
	case in.Next != nil:
		return nil, store.Errorf(store.CodeInvalidArgument, "next cannot be combined with items")
	}
	return c.Store.FinishMany(ctx, op, c.Endpoint.ID, in.Items)
}
