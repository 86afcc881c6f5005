package store

// The operator CLI's calls (cmd/switchboard): they run as the owner of the schema, not as the
// runtime role, so the runtime is not granted their functions (tests/sqltest
// TestRuntimePrivileges skips the files named operator*.go).

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
)

// Querier is a connection, a pool or a transaction (for callers outside the server, such as
// the operator CLI).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PushMany inserts a pending todo for each of items, a JSON array of {title, payload?, key?},
// in one statement (switchboard.push_many, all or nothing): {"created": N, "ids": [...]}, one
// id per item. For operators: the runtime role may not call it.
func PushMany(ctx context.Context, q Querier, endpoint, queue string, items json.RawMessage) ([]byte, error) {
	var out []byte
	if err := q.QueryRow(ctx, `SELECT switchboard.push_many($1, $2, $3)`, endpoint, queue, string(items)).Scan(&out); err != nil {
		return nil, Classify(err)
	}
	return out, nil
}
