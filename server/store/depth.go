package store

import "context"

// QueueDepth is one row of the view switchboard.queue_depth.
type QueueDepth struct {
	Slug, Queue, State string
	Todos              int64
	OldestPending      *float64 // seconds; nil: none pending
}

// QueueDepths reads switchboard.queue_depth (for the metrics scrape).
func (s *Store) QueueDepths(ctx context.Context) ([]QueueDepth, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT slug, queue, state, todos, extract(epoch FROM oldest_pending_age)::float8 FROM switchboard.queue_depth`)
	if err != nil {
		return nil, Classify(err)
	}
	defer rows.Close()
	var out []QueueDepth
	for rows.Next() {
		var d QueueDepth
		if err := rows.Scan(&d.Slug, &d.Queue, &d.State, &d.Todos, &d.OldestPending); err != nil {
			return nil, Classify(err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, Classify(err)
	}
	return out, nil
}
