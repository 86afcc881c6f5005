package store

import (
	"context"
	"time"
)

// PurgeResult is what retention deleted (switchboard.purge, summed over batches).
type PurgeResult struct {
	TodosDone int64 // done and cancelled todos past retain_done_days
	TodosDead int64 // dead letters past retain_dead_days
	Events    int64 // webhook events past retain_events_days that no todo points to
	Batches   int
}

// Purge calls switchboard.purge() until it reports nothing more, each batch its own short
// transaction (one statement in autocommit), so no lock is held for long. It stops early when
// budget runs out; the next run goes on where this one stopped.
func (s *Store) Purge(ctx context.Context, budget time.Duration) (PurgeResult, error) {
	var r PurgeResult
	deadline := time.Now().Add(budget)
	for {
		var done, dead, events int64
		var more bool
		err := s.pool.QueryRow(ctx, `SELECT todos_done, todos_dead, events, more FROM switchboard.purge(false)`).
			Scan(&done, &dead, &events, &more)
		if err != nil {
			return r, Classify(err)
		}
		r.TodosDone += done
		r.TodosDead += dead
		r.Events += events
		r.Batches++
		if !more || time.Now().After(deadline) {
			return r, nil
		}
	}
}

// ExpireCredentials ends the rotation graces that ran out (switchboard.expire_credentials) and
// returns how many endpoints it touched; their servers close the old credential's sessions.
func (s *Store) ExpireCredentials(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT switchboard.expire_credentials()`).Scan(&n); err != nil {
		return 0, Classify(err)
	}
	return n, nil
}

// RecordBaseURL stores the public URL this server serves, for the CLI's mcp_url.
func (s *Store) RecordBaseURL(ctx context.Context, baseURL string) error {
	if _, err := s.pool.Exec(ctx, `SELECT switchboard.record_base_url($1)`, baseURL); err != nil {
		return Classify(err)
	}
	return nil
}
