package server

import (
	"context"
	"log/slog"
	"time"

	"switchboard/server/metrics"
	"switchboard/server/store"
)

// reaper calls switchboard.reap() on an interval. Claims take over expired leases and due
// retries by themselves, so nothing depends on its cadence; it keeps the queue tidy for
// readers. Running it beside pg_cron or another server is safe (SKIP LOCKED in SQL).
type reaper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startReaper runs the loop; interval <= 0 disables it. stop ends it and waits.
func startReaper(st *store.Store, interval time.Duration, log *slog.Logger, m *metrics.Metrics) *reaper {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reaper{cancel: cancel, done: make(chan struct{})}
	if interval <= 0 {
		close(r.done)
		return r
	}
	go func() {
		defer close(r.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, max(interval, 10*time.Second))
			res, err := st.Reap(rctx)
			rcancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				m.ReaperRuns.WithLabelValues("error").Inc()
				log.Error("reaper run failed", "err", store.Classify(err).Unwrap())
				continue
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
	}()
	return r
}

func (r *reaper) stop() {
	r.cancel()
	<-r.done
}
