package main

// The soak section: a steady drain with retention on, compressed. A producer adds todos at a
// fixed rate, workers run claim_next+complete, and a purger calls switchboard.purge() on a short
// interval (the maintenance loop, sped up) with retain_done_days set to a few seconds, so done
// rows are deleted as fast as they are made, the way a week of retention behaves over a week.
// The claim rate, the time one claim_next+complete cycle takes, and the size of
// switchboard.todos (heap, indexes, TOAST) are taken over a window near the start and one at
// the end; a queue that bloats or slows shows a ratio away from 1. The claim rate follows the
// arrival rate while the workers keep up; the cycle time is where bloat would show first.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

func init() {
	register(Section{Name: "soak", Order: 90, Run: soakSection,
		Doc: "steady drain with purge on: claim rate and table size at the start and at the end (flat within 10%)"})
}

const (
	// The first window starts once autovacuum (every autovacuum_naptime, 1 min by default) has
	// visited the table a few times: before the first visit no deleted row's space is reused, and
	// the indexes still grew for about two more (a 4-minute soak from 75 s: indexes 1.43 -> 1.84
	// MiB, heap flat; 8 minutes from 150 s: both flat).
	soakTotal     = 480 * time.Second // the whole soak
	soakWindow    = 15 * time.Second  // each measured window
	soakSettle    = 150 * time.Second // before the first window
	soakRetention = 5.0               // seconds a done todo is kept
	soakWorkers   = 4
	soakRate      = 150 // todos/s the producer creates: well below what this shared machine drains
)

func soakSection(ctx context.Context, b *Bench) ([]Row, error) {
	f, err := newSQLFixture(ctx, b, 1)
	if err != nil {
		return nil, err
	}
	defer f.close()
	ep := f.endpoints[0]
	if _, err := f.admin.Exec(ctx, `UPDATE switchboard.settings SET value = $1 WHERE key = 'retain_done_days'`, soakRetention/86400); err != nil {
		return nil, err
	}
	conns, err := b.Connect(ctx, f.url, soakWorkers+2)
	if err != nil {
		return nil, err
	}
	defer CloseAll(conns)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var claims, purged, busyNanos atomic.Int64
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil && runCtx.Err() == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel()
	}
	loop := func(c *pgx.Conn, body func(c *pgx.Conn) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				if err := body(c); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	// Producer: a steady soakRate, in batches of 25 every 100 ms. A fixed arrival rate gives the
	// table a steady state (rate x retention done rows), so its size can be compared.
	next := time.Now()
	loop(conns[0], func(c *pgx.Conn) error {
		next = next.Add(time.Second * 25 / soakRate)
		sleep(runCtx, time.Until(next))
		_, err := c.Exec(runCtx, `SELECT switchboard.create_todo($1, 'bench', 'soak', `+benchPayload+`) FROM generate_series(1, 25)`, ep)
		return err
	})
	// Purger: the maintenance loop, every 500 ms, batch after batch.
	loop(conns[1], func(c *pgx.Conn) error {
		for {
			var d, x, e int64
			var more bool
			if err := c.QueryRow(runCtx, `SELECT todos_done, todos_dead, events, more FROM switchboard.purge(false)`).Scan(&d, &x, &e, &more); err != nil {
				return err
			}
			purged.Add(d + x)
			if !more {
				break
			}
		}
		sleep(runCtx, 500*time.Millisecond)
		return nil
	})
	for _, c := range conns[2:] {
		loop(c, func(c *pgx.Conn) error {
			var id pgtype.UUID
			t0 := time.Now()
			if err := c.QueryRow(runCtx, "SELECT (switchboard.claim_next($1)->'todo'->>'id')::uuid", ep).Scan(&id); err != nil {
				return err
			}
			if !id.Valid {
				sleep(runCtx, 5*time.Millisecond) // drained: wait for the producer
				return nil
			}
			if _, err := c.Exec(runCtx, "SELECT switchboard.complete($1, $2)", ep, id); err != nil {
				return err
			}
			busyNanos.Add(int64(time.Since(t0)))
			claims.Add(1)
			return nil
		})
	}

	type sample struct {
		rate, cycleMs             float64
		size, heap, rows, vacuums int64
	}
	window := func() (sample, error) {
		c0, b0, t0 := claims.Load(), busyNanos.Load(), time.Now()
		sleep(runCtx, soakWindow)
		n := claims.Load() - c0
		s := sample{rate: float64(n) / time.Since(t0).Seconds()}
		if n > 0 {
			s.cycleMs = float64(busyNanos.Load()-b0) / float64(n) / 1e6
		}
		err := f.admin.QueryRow(ctx, `SELECT pg_total_relation_size('switchboard.todos'), pg_relation_size('switchboard.todos'),
			(SELECT count(*) FROM switchboard.todos),
			(SELECT autovacuum_count + vacuum_count FROM pg_stat_user_tables WHERE relid = 'switchboard.todos'::regclass)`).
			Scan(&s.size, &s.heap, &s.rows, &s.vacuums)
		return s, err
	}
	b.Logf("soak: %s in all, windows of %s", soakTotal, soakWindow)
	sleep(runCtx, soakSettle)
	start, err := window()
	if err == nil {
		sleep(runCtx, soakTotal-soakSettle-2*soakWindow)
	}
	var end sample
	if err == nil {
		end, err = window()
	}
	cancel()
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err != nil {
		return nil, err
	}
	rateRatio := Ratio(end.rate, start.rate)
	sizeRatio := float64(end.size) / float64(start.size)
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	note := fmt.Sprintf("%s soak at %d todos/s, retention %.0f s, %d purged; rows %d -> %d; vacuums of todos %d -> %d",
		soakTotal, soakRate, soakRetention, purged.Load(), start.rows, end.rows, start.vacuums, end.vacuums)
	return []Row{
		{Name: "claim_next+complete/s, end vs start", Value: end.rate, Unit: "cycles/s", Baseline: start.rate, BaseName: "start",
			Ratio: rateRatio, Target: "within 10% of start", Pass: Below(absf(rateRatio-1), 0.1001), Note: note},
		{Name: "claim_next+complete latency, end vs start", Value: end.cycleMs, Unit: "ms", Baseline: start.cycleMs, BaseName: "start",
			Ratio: Ratio(start.cycleMs, end.cycleMs), Note: "no target: on a shared machine it follows the load more than the table"},
		{Name: "switchboard.todos size, end vs start", Value: mib(end.size), Unit: "MiB", Baseline: mib(start.size), BaseName: "start",
			Ratio: sizeRatio, Target: "within 10% of start", Pass: Below(absf(sizeRatio-1), 0.1001),
			Note: fmt.Sprintf("heap %.2f -> %.2f MiB, indexes %.2f -> %.2f MiB", mib(start.heap), mib(end.heap), mib(start.size-start.heap), mib(end.size-end.heap))},
	}, nil
}

func absf(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
