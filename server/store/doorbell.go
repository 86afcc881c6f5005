package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Ready is a pending todo as the doorbell sees it (switchboard.ready_todos_since, oldest_pending).
type Ready struct {
	Endpoint string // ReadySince only
	ID       string
	Queue    string
	Title    string
	Source   string
	Kind     string
	ReadyAt  time.Time // for a time-based ring (DueTodos): the moment the lease expired or the retry window elapsed
	Attempt  int       // claims so far: a requeue keeps it, a claim raises it
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
		if err := rows.Scan(&r.ID, &r.Queue, &r.Title, &r.Source, &kind, &r.ReadyAt, &r.Attempt); err != nil {
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

// ReadySince: switchboard.ready_todos_since — pending todos of every endpoint (granted queues)
// that became ready at or after since, oldest first, at most limit, in one walk of the
// todos_ready index; and the database clock of the read (a doorbell cursor moves up to it when
// the page was not full). A zero since means "the last second" by the database clock.
func (s *Store) ReadySince(ctx context.Context, since time.Time, limit int) (rows []Ready, now time.Time, err error) {
	var sinceArg *time.Time
	if !since.IsZero() {
		sinceArg = &since
	}
	// The LEFT JOIN gives one row (the clock) when nothing is ready.
	q, err := s.pool.Query(ctx,
		`SELECT n.now, r.endpoint_id, r.id, r.queue, r.title, r.source, r.kind, r.ready_at, r.attempt
		   FROM (SELECT now()) n (now)
		   LEFT JOIN LATERAL switchboard.ready_todos_since(coalesce($1::timestamptz, now() - interval '1 second'), $2) r ON true`,
		sinceArg, limit)
	if err != nil {
		return nil, time.Time{}, Classify(err)
	}
	defer q.Close()
	// One set of scan targets for all rows: a '*' signal reads twice, and the per-row pointers
	// of a fresh set were most of the doorbell's garbage.
	var ep, id, queue, title, source, kind pgtype.Text
	var at pgtype.Timestamptz
	var attempt pgtype.Int4
	for q.Next() {
		if err := q.Scan(&now, &ep, &id, &queue, &title, &source, &kind, &at, &attempt); err != nil {
			return nil, time.Time{}, Classify(err)
		}
		if !id.Valid {
			continue
		}
		rows = append(rows, Ready{Endpoint: ep.String, ID: id.String, Queue: queue.String, Title: title.String,
			Source: source.String, Kind: kind.String, ReadyAt: at.Time, Attempt: int(attempt.Int32)})
	}
	if err := q.Err(); err != nil {
		return nil, time.Time{}, Classify(err)
	}
	return rows, now, nil
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
		`SELECT id, queue, title, source, kind, ready_at, attempt FROM switchboard.oldest_pending($1, $2)`,
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

// Due is what one time-based doorbell read found (DueTodos).
type Due struct {
	Rows map[string][]Ready // by endpoint: todos time made claimable since the cursor, oldest first
	Next time.Time          // the earliest such moment still to come (zero: none)
	Now  time.Time          // the database clock at the read
}

// DueTodos: switchboard.due_todos and switchboard.next_due in one round trip — the todos of
// these endpoints whose lease expired or whose retry window elapsed at or after since (at most
// limit), and the next such moment within the look-ahead within.
func (s *Store) DueTodos(ctx context.Context, endpoints []string, since time.Time, limit int, within time.Duration) (Due, error) {
	var sinceArg *time.Time
	if !since.IsZero() {
		sinceArg = &since
	}
	rows, err := s.pool.Query(ctx,
		`SELECT now(), d.endpoint_id, d.id, d.queue, d.title, d.source, d.kind, d.due_at, d.attempt
		   FROM switchboard.due_todos($1::uuid[], coalesce($2::timestamptz, now() - interval '1 second'), $3) d
		 UNION ALL
		 SELECT now(), NULL, NULL, NULL, NULL, NULL, NULL,
		        switchboard.next_due($1::uuid[], make_interval(secs => $4::float8)), NULL`,
		endpoints, sinceArg, limit, within.Seconds())
	if err != nil {
		return Due{}, Classify(err)
	}
	defer rows.Close()
	out := Due{Rows: map[string][]Ready{}}
	for rows.Next() {
		var ep, id, queue, title, source, kind *string
		var at *time.Time
		var attempt *int
		if err := rows.Scan(&out.Now, &ep, &id, &queue, &title, &source, &kind, &at, &attempt); err != nil {
			return Due{}, Classify(err)
		}
		if id == nil { // the next_due row
			if at != nil {
				out.Next = *at
			}
			continue
		}
		r := Ready{ID: *id, Queue: *queue, Title: *title, Source: *source, ReadyAt: *at, Attempt: *attempt}
		if kind != nil {
			r.Kind = *kind
		}
		out.Rows[*ep] = append(out.Rows[*ep], r)
	}
	if err := rows.Err(); err != nil {
		return Due{}, Classify(err)
	}
	return out, nil
}

// Claimable: switchboard.claimable_todos — which of ids a claim could take now.
func (s *Store) Claimable(ctx context.Context, ids []string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT t::text FROM switchboard.claimable_todos($1::uuid[]) t`, ids)
	if err != nil {
		return nil, Classify(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, Classify(err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, Classify(err)
	}
	return out, nil
}

// DoorbellSettings are the settings the doorbell reads (zero: not set in this database).
type DoorbellSettings struct {
	Window    time.Duration // doorbell_window_ms
	RingAgain time.Duration // ring_again_seconds
	WaitMax   time.Duration // claim_wait_max_seconds
	HasWait   bool          // claim_wait_max_seconds exists (0 is a value: waiting off)
}

// ReadDoorbellSettings reads them in one call.
func (s *Store) ReadDoorbellSettings(ctx context.Context) (DoorbellSettings, error) {
	var w, again, wait *float64
	err := s.pool.QueryRow(ctx, `SELECT switchboard.setting('doorbell_window_ms')::float8,
	                                    switchboard.setting('ring_again_seconds')::float8,
	                                    switchboard.setting('claim_wait_max_seconds')::float8`).Scan(&w, &again, &wait)
	if err != nil {
		return DoorbellSettings{}, Classify(err)
	}
	var out DoorbellSettings
	if w != nil {
		out.Window = time.Duration(*w * float64(time.Millisecond))
	}
	if again != nil {
		out.RingAgain = time.Duration(*again * float64(time.Second))
	}
	if wait != nil {
		out.WaitMax, out.HasWait = time.Duration(*wait*float64(time.Second)), true
	}
	return out, nil
}
