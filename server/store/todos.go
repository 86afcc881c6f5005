package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
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
}

const claimNextSQL = `SELECT switchboard.claim_next($1, $2, $3, $4)`

// ClaimNext: switchboard.claim_next; {"empty": true} when nothing is claimable.
func (s *Store) ClaimNext(ctx context.Context, endpoint string, o NextOptions) ([]byte, error) {
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

// Finishing transitions of a held todo.
type Op int

const (
	Complete Op = iota
	Fail
	Release
)

func (op Op) sql() string {
	switch op {
	case Complete:
		return `SELECT switchboard.complete($1, $2, $3, $4)`
	case Fail:
		return `SELECT switchboard.fail($1, $2, $3, $4)`
	default:
		return `SELECT switchboard.release($1, $2, $3)`
	}
}

func (op Op) args(endpoint, id string, result json.RawMessage, leaseToken *string) []any {
	if op == Release {
		return []any{endpoint, id, leaseToken}
	}
	return []any{endpoint, id, nullJSON(result), leaseToken}
}

// Finish runs complete, fail or release (result is ignored for release).
//
// With next set it also claims the next todo as claim_next would, in the same transaction
// behind a savepoint, sent as one pipelined batch (one round trip):
//
//	BEGIN; SELECT <op>; SAVEPOINT next_claim; SELECT claim_next; COMMIT
//
// When the transition is refused, PostgreSQL skips the rest and the transaction is rolled back:
// the error is the transition's. When only the claim fails, the server has skipped the COMMIT,
// so a second round trip rolls back to the savepoint and commits: the transition stands and
// nextErr carries the claim's refusal. nextJSON is claim_next's result otherwise.
func (s *Store) Finish(ctx context.Context, op Op, endpoint, id string, result json.RawMessage,
	leaseToken *string, next *NextOptions) (todo, nextJSON []byte, nextErr *Error, err error) {
	id, bad := todoID(id)
	if bad != nil {
		return nil, nil, nil, bad
	}
	if next == nil {
		todo, err = s.jsonCall(ctx, op.sql(), op.args(endpoint, id, result, leaseToken)...)
		return todo, nil, nil, err
	}

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, nil, Classify(err)
	}
	// A connection left inside a transaction (any failure below) is destroyed on release.
	defer conn.Release()

	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(op.sql(), op.args(endpoint, id, result, leaseToken)...)
	b.Queue(`SAVEPOINT next_claim`)
	b.Queue(claimNextSQL, endpoint, next.Queue, next.LeaseTTL, next.RequireFence)
	b.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, b)

	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, nil, nil, Classify(err)
	}
	if err := br.QueryRow().Scan(&todo); err != nil {
		_ = br.Close()
		_, _ = conn.Exec(ctx, `ROLLBACK`)
		return nil, nil, nil, Classify(err)
	}
	if _, err := br.Exec(); err != nil { // SAVEPOINT
		_ = br.Close()
		_, _ = conn.Exec(ctx, `ROLLBACK`)
		return nil, nil, nil, Classify(err)
	}
	claimErr := br.QueryRow().Scan(&nextJSON)
	if claimErr == nil {
		if _, err := br.Exec(); err != nil { // COMMIT
			_ = br.Close()
			return nil, nil, nil, Classify(err)
		}
		if err := br.Close(); err != nil {
			return nil, nil, nil, Classify(err)
		}
		return todo, nextJSON, nil, nil
	}
	_ = br.Close()
	// The claim failed: keep the transition, drop the claim.
	if err := conn.Conn().PgConn().Exec(ctx, `ROLLBACK TO SAVEPOINT next_claim; COMMIT`).Close(); err != nil {
		return nil, nil, nil, Classify(errors.Join(claimErr, err))
	}
	return todo, nil, Classify(claimErr), nil
}
