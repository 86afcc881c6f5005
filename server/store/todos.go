package store

import (
	"context"
	"encoding/json"
	"strings"
)

// errTodoNotFound is what a malformed todo id gets: the same refusal as an unknown one
// (switchboard.refuse_todo), so an id's shape reveals nothing.
var errTodoNotFound = &Error{Code: CodeNotFound, Message: "todo not found"}

// ParseID reports whether s is a UUID in its text form and returns it lower-cased.
func ParseID(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return "", false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return "", false
		}
	}
	return strings.ToLower(s), true
}

func todoID(id string) (string, *Error) {
	v, ok := ParseID(id)
	if !ok {
		return "", errTodoNotFound
	}
	return v, nil
}

// nullJSON turns an absent or JSON-null value into SQL NULL.
func nullJSON(v json.RawMessage) any {
	t := strings.TrimSpace(string(v))
	if t == "" || t == "null" {
		return nil
	}
	return string(v)
}

// ListTodos: switchboard.list_todos. Nil filters are absent.
func (s *Store) ListTodos(ctx context.Context, endpoint string, queue, state *string, limit *int) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.list_todos($1, $2, $3, $4)`, endpoint, queue, state, limit)
}

// GetTodo: switchboard.get_todo.
func (s *Store) GetTodo(ctx context.Context, endpoint, id string) ([]byte, error) {
	id, bad := todoID(id)
	if bad != nil {
		return nil, bad
	}
	return s.jsonCall(ctx, `SELECT switchboard.get_todo($1, $2)`, endpoint, id)
}

// Claim: switchboard.claim.
func (s *Store) Claim(ctx context.Context, endpoint, id string, leaseTTL *int, requireFence bool) ([]byte, error) {
	id, bad := todoID(id)
	if bad != nil {
		return nil, bad
	}
	return s.jsonCall(ctx, `SELECT switchboard.claim($1, $2, $3, $4)`, endpoint, id, leaseTTL, requireFence)
}

// NextOptions are the arguments of claim_next (and of the `next` option of complete, fail and
// release).
type NextOptions struct {
	Queue        *string
	LeaseTTL     *int
	RequireFence bool
	// Max, when set (1 to MaxBatch), claims up to that many todos in one call: the answer is
	// {"todos": [...]} (switchboard.claim_next_many). Not an option of next.
	Max *int
}

const claimNextSQL = `SELECT switchboard.claim_next($1, $2, $3, $4)`

// ClaimNext: switchboard.claim_next; {"empty": true} when nothing is claimable. With o.Max,
// switchboard.claim_next_many.
func (s *Store) ClaimNext(ctx context.Context, endpoint string, o NextOptions) ([]byte, error) {
	if o.Max != nil {
		return s.claimNextMany(ctx, endpoint, o)
	}
	return s.jsonCall(ctx, claimNextSQL, endpoint, o.Queue, o.LeaseTTL, o.RequireFence)
}

// Heartbeat: switchboard.heartbeat.
func (s *Store) Heartbeat(ctx context.Context, endpoint, id string, leaseTTL *int, leaseToken *string) ([]byte, error) {
	id, bad := todoID(id)
	if bad != nil {
		return nil, bad
	}
	return s.jsonCall(ctx, `SELECT switchboard.heartbeat($1, $2, $3, $4)`, endpoint, id, leaseTTL, leaseToken)
}

// Op is a finishing transition of a held todo: its verb (also finish_and_claim_next's
// p_verb) and its SQL call. release takes no result.
type Op struct {
	verb, sql   string
	takesResult bool
}

var (
	Complete = Op{"complete", `SELECT switchboard.complete($1, $2, $3, $4)`, true}
	Fail     = Op{"fail", `SELECT switchboard.fail($1, $2, $3, $4)`, true}
	Release  = Op{"release", `SELECT switchboard.release($1, $2, $3)`, false}
)

func (op Op) args(endpoint, id string, result json.RawMessage, leaseToken *string) []any {
	if !op.takesResult {
		return []any{endpoint, id, leaseToken}
	}
	return []any{endpoint, id, nullJSON(result), leaseToken}
}

// Finish runs complete, fail or release (result is ignored for release). With next set it is
// switchboard.finish_and_claim_next: the same transition, then a claim as claim_next would
// make, in one statement; the result is the todo with "next" (claim_next's result, or
// {"error": "<code>: <message>"} when only the claim failed).
func (s *Store) Finish(ctx context.Context, op Op, endpoint, id string, result json.RawMessage,
	leaseToken *string, next *NextOptions) ([]byte, error) {
	id, bad := todoID(id)
	if bad != nil {
		return nil, bad
	}
	if next == nil {
		return s.jsonCall(ctx, op.sql, op.args(endpoint, id, result, leaseToken)...)
	}
	return s.jsonCall(ctx, `SELECT switchboard.finish_and_claim_next($1, $2, $3, $4, $5, $6, $7, $8)`,
		endpoint, id, op.verb, nullJSON(result), leaseToken, next.Queue, next.LeaseTTL, next.RequireFence)
}
