package store

import (
	"context"
	"time"
)

// Ready is a pending todo as the doorbell sees it (switchboard.ready_todos, oldest_pending).
type Ready struct {
	ID      string
	Queue   string
	Title   string
	Source  string
	Kind    string
	ReadyAt time.Time
}

func (s *Store) readyRows(ctx context.Context, sql string, args ...any) ([]Ready, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, Classify(err)
	}
	defer rows.Close()
	var out []Ready
	for rows.Next() {
		var r Ready
		var kind *string
		if err := rows.Scan(&r.ID, &r.Queue, &r.Title, &r.Source, &kind, &r.ReadyAt); err != nil {
			return nil, Classify(err)
		}
		if kind != nil {
			r.Kind = *kind
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, Classify(err)
	}
	return out, nil
}

// ReadyTodos: switchboard.ready_todos — pending todos of the endpoint (granted queues) that
// became ready at or after since, oldest first. A zero since means "the last second" by the
// database clock.
func (s *Store) ReadyTodos(ctx context.Context, endpoint string, since time.Time, limit int) ([]Ready, error) {
	var sinceArg *time.Time
	if !since.IsZero() {
		sinceArg = &since
	}
	return s.readyRows(ctx,
		`SELECT id, queue, title, source, kind, ready_at
		   FROM switchboard.ready_todos($1, coalesce($2::timestamptz, now() - interval '1 second'), $3)`,
		endpoint, sinceArg, limit)
}

// Cursor is where a doorbell read of one endpoint starts (zero Since: the last second).
type Cursor struct {
	Endpoint string
	Since    time.Time
}

// ReadyTodosMany is ReadyTodos for several endpoints in one round trip (the rows of each
// endpoint oldest first, at most limit each), keyed by endpoint id.
func (s *Store) ReadyTodosMany(ctx context.Context, cursors []Cursor, limit int) (map[string][]Ready, error) {
	eps := make([]string, len(cursors))
	since := make([]*time.Time, len(cursors))
	for i, c := range cursors {
		eps[i] = c.Endpoint
		if !c.Since.IsZero() {
			t := c.Since
			since[i] = &t
		}
	}
	rows, err := s.pool.Query(ctx,
		`SELECT c.ep, r.id, r.queue, r.title, r.source, r.kind, r.ready_at
		   FROM unnest($1::uuid[], $2::timestamptz[]) AS c(ep, since),
		        LATERAL switchboard.ready_todos(c.ep, coalesce(c.since, now() - interval '1 second'), $3) r`,
		eps, since, limit)
	if err != nil {
		return nil, Classify(err)
	}
	defer rows.Close()
	out := map[string][]Ready{}
	for rows.Next() {
		var ep string
		var r Ready
		var kind *string
		if err := rows.Scan(&ep, &r.ID, &r.Queue, &r.Title, &r.Source, &kind, &r.ReadyAt); err != nil {
			return nil, Classify(err)
		}
		if kind != nil {
			r.Kind = *kind
		}
		out[ep] = append(out[ep], r)
	}
	if err := rows.Err(); err != nil {
		return nil, Classify(err)
	}
	return out, nil
}

// Now is the database clock (doorbell cursors compare with ready_at, which it sets).
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&t); err != nil {
		return time.Time{}, Classify(err)
	}
	return t, nil
}

// OldestPending: switchboard.oldest_pending — the endpoint's oldest pending todos.
func (s *Store) OldestPending(ctx context.Context, endpoint string, limit int) ([]Ready, error) {
	return s.readyRows(ctx,
		`SELECT id, queue, title, source, kind, ready_at FROM switchboard.oldest_pending($1, $2)`,
		endpoint, limit)
}

// DoorbellWindow is the coalescing window of switchboard.ring (setting doorbell_window_ms).
func (s *Store) DoorbellWindow(ctx context.Context) (time.Duration, error) {
	var ms *float64
	if err := s.pool.QueryRow(ctx, `SELECT switchboard.setting('doorbell_window_ms')::float8`).Scan(&ms); err != nil {
		return 0, Classify(err)
	}
	if ms == nil {
		return 0, nil
	}
	return time.Duration(*ms * float64(time.Millisecond)), nil
}

// ReapResult is what switchboard.reap() did.
type ReapResult struct {
	Requeued        int
	DeadLettered    int
	RetriesReleased int
}

// Reap: switchboard.reap() — requeue or dead-letter expired leases, release due retries.
func (s *Store) Reap(ctx context.Context) (ReapResult, error) {
	var r ReapResult
	err := s.pool.QueryRow(ctx, `SELECT requeued, dead_lettered, retries_released FROM switchboard.reap()`).
		Scan(&r.Requeued, &r.DeadLettered, &r.RetriesReleased)
	if err != nil {
		return ReapResult{}, Classify(err)
	}
	return r, nil
}
