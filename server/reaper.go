package server

import (
	"context"
	"log/slog"
	"time"

	"switchboard/server/metrics"
	"switchboard/server/store"
)

// reaper is the server's maintenance loop. Every interval it calls switchboard.reap(); every
// purgeInterval it ends expired credential graces (switchboard.expire_credentials) and runs
// retention (switchboard.purge, batch after batch, each its own transaction). Claims take over
// expired leases and due retries by themselves, so nothing depends on its cadence. Running it
// beside pg_cron or another server is safe (advisory lock and SKIP LOCKED in SQL).
type reaper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// purgeBudget bounds one purge run; what is left waits for the next run.
const purgeBudget = 20 * time.Second

// rollupEvery is the longest wait between two runs of the console chart's rollup; rollupBudget
// bounds one run (a server starting on a day of history catches up an hour a statement).
const (
	rollupEvery  = 10 * time.Second
	rollupBudget = 5 * time.Second
)

// startReaper runs the loop; an interval <= 0 disables that part. stop ends it and waits.
func startReaper(st *store.Store, interval, purgeInterval time.Duration, log *slog.Logger, m *metrics.Metrics) *reaper {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reaper{cancel: cancel, done: make(chan struct{})}
	if interval <= 0 && purgeInterval <= 0 {
		close(r.done)
		return r
	}
	tick := func(d time.Duration) <-chan time.Time {
		if d <= 0 {
			return nil
		}
		return time.NewTicker(d).C
	}
	reapC, purgeC := tick(interval), tick(purgeInterval)
	// The console chart's rollup runs with the reaper, at least every rollupEvery, so that a
	// failed attempt is seen while it waits for its retry (backoff_base_seconds: 30 s).
	var rollupC <-chan time.Time
	if interval > 0 {
		rollupC = tick(min(interval, rollupEvery))
	}
	go func() {
		defer close(r.done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-reapC:
				reapOnce(ctx, st, interval, log, m)
			case <-purgeC:
				purgeOnce(ctx, st, log, m)
			case <-rollupC:
				rollupOnce(ctx, st, log)
			}
		}
	}()
	return r
}

func reapOnce(ctx context.Context, st *store.Store, interval time.Duration, log *slog.Logger, m *metrics.Metrics) {
	rctx, rcancel := context.WithTimeout(ctx, max(interval, 10*time.Second))
	res, err := st.Reap(rctx)
	rcancel()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		m.ReaperRuns.WithLabelValues("error").Inc()
		log.Error("reaper run failed", "err", store.Classify(err).Unwrap())
		return
	}
	m.ReaperRuns.WithLabelValues("ok").Inc()
	m.Reaped.WithLabelValues("requeued").Add(float64(res.Requeued))
	m.Reaped.WithLabelValues("dead_lettered").Add(float64(res.DeadLettered))
	m.Reaped.WithLabelValues("retries_released").Add(float64(res.RetriesReleased))
	if res != (store.ReapResult{}) {
		log.Info("reaped", "requeued", res.Requeued, "dead_lettered", res.DeadLettered,
			"retries_released", res.RetriesReleased)
	}
}

func purgeOnce(ctx context.Context, st *store.Store, log *slog.Logger, m *metrics.Metrics) {
	pctx, pcancel := context.WithTimeout(ctx, purgeBudget+10*time.Second)
	defer pcancel()
	if n, err := st.ExpireCredentials(pctx); err != nil {
		if ctx.Err() == nil {
			log.Error("credential expiry failed", "err", store.Classify(err).Unwrap())
		}
	} else if n > 0 {
		log.Info("rotation grace ended", "endpoints", n)
	}
	res, err := st.Purge(pctx, purgeBudget)
	m.Purged.WithLabelValues("todos_done").Add(float64(res.TodosDone))
	m.Purged.WithLabelValues("todos_dead").Add(float64(res.TodosDead))
	m.Purged.WithLabelValues("events").Add(float64(res.Events))
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		m.PurgeRuns.WithLabelValues("error").Inc()
		log.Error("purge failed", "err", store.Classify(err).Unwrap())
		return
	}
	m.PurgeRuns.WithLabelValues("ok").Inc()
	if res.TodosDone+res.TodosDead+res.Events > 0 {
		log.Info("purged", "todos_done", res.TodosDone, "todos_dead", res.TodosDead, "events", res.Events,
			"batches", res.Batches)
	}
}

func rollupOnce(ctx context.Context, st *store.Store, log *slog.Logger) {
	rctx, rcancel := context.WithTimeout(ctx, rollupBudget+10*time.Second)
	defer rcancel()
	if _, err := st.ConsoleRollup(rctx, rollupBudget); err != nil && ctx.Err() == nil {
		log.Error("console rollup failed", "err", store.Classify(err).Unwrap())
	}
}

func (r *reaper) stop() {
	r.cancel()
	<-r.done
}
