package store

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Batches (contract §12): claim_next with max, complete, fail and release with items, and the
// operator's push of many todos. Each is one call of a *_many function of db/code/queue.sql.

// MaxBatch is the most todos one batch call claims or finishes.
const MaxBatch = 50

const claimNextManySQL = `SELECT switchboard.claim_next_many($1, $2, $3, $4, $5)`

// claimNextMany: switchboard.claim_next_many; {"todos": [], "empty": true} when nothing is
// claimable. ClaimNext calls it when o.Max is set.
func (s *Store) claimNextMany(ctx context.Context, endpoint string, o NextOptions) ([]byte, error) {
	return s.jsonCall(ctx, claimNextManySQL, endpoint, o.Max, o.Queue, o.LeaseTTL, o.RequireFence)
}

// manySQL is the batch function of each finishing verb.
var manySQL = map[string]string{
	Complete.verb: `SELECT switchboard.complete_many($1, $2)`,
	Fail.verb:     `SELECT switchboard.fail_many($1, $2)`,
	Release.verb:  `SELECT switchboard.release_many($1, $2)`,
}

// FinishMany runs complete, fail or release for each of items, a JSON array of
// {id, result?, lease_token?} (1 to MaxBatch), in one statement: {"results": [...]}, one per
// item in the order given, each {id, ok: true, todo} or {id, ok: false, code, message}.
//
// A batch locks its todos in the order its plan meets them, so it can deadlock with another
// batch over the same todos, or with the reaper's requeue of expired leases. PostgreSQL then
// aborts one of them having changed nothing, and it runs again (at most twice more): a
// deadlock is a refusal of neither caller, so it does not reach the agent as internal.
func (s *Store) FinishMany(ctx context.Context, op Op, endpoint string, items json.RawMessage) ([]byte, error) {
	for try := 1; ; try++ {
		out, err := s.jsonCall(ctx, manySQL[op.verb], endpoint, string(items))
		var pgErr *pgconn.PgError
		if try == 3 || !errors.As(err, &pgErr) || pgErr.Code != "40P01" { // deadlock_detected
			return out, err
		}
	}
}
