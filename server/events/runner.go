package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchboard/server/store"
)

// Interval is how often a server runs the events tick (record, fan out) and drains the
// outbox, besides at once when the doorbell rings. Each is a few index probes when there is
// nothing to do.
const Interval = 250 * time.Millisecond

// senders bounds the POSTs one server makes at once.
const senders = 16

// Runner is a server's events loop.
type Runner struct {
	st     *store.Store
	client *Client
	log    *slog.Logger
	sent   *prometheus.CounterVec
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// Wake runs a tick now (the doorbell rang: work became ready); it never blocks.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// NewRunner builds the loop; reg (may be nil) gets switchboard_events_deliveries_total.
func NewRunner(st *store.Store, client *Client, log *slog.Logger, reg prometheus.Registerer) *Runner {
	r := &Runner{st: st, client: client, log: log, done: make(chan struct{}), wake: make(chan struct{}, 1),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_events_deliveries_total",
			Help: "MCP Events webhook POSTs by outcome (ok, gone: 410/413, not retried; or the failure category).",
		}, []string{"outcome"})}
	if reg != nil {
		reg.MustRegister(r.sent)
	}
	return r
}

// Start runs the loop until Stop.
func (r *Runner) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		t := time.NewTicker(Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.Once(ctx)
			case <-r.wake:
				r.Once(ctx)
			}
		}
	}()
}

// Stop ends the loop and waits for the POSTs in flight (each bounded by requestTimeout). A row
// a stopped server had taken is sent again by another after its lease.
func (r *Runner) Stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
}

// Once runs one tick: record and fan out, then send what is due until nothing is.
func (r *Runner) Once(ctx context.Context) {
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, _, err := r.st.EventsTick(tctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("events tick failed", "err", store.Classify(err).Unwrap())
		}
		return
	}
	for ctx.Err() == nil {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		items, err := r.st.OutboxTake(tctx, senders)
		cancel()
		if err != nil {
			r.log.Warn("events outbox take failed", "err", store.Classify(err).Unwrap())
			return
		}
		if len(items) == 0 {
			return
		}
		var wg sync.WaitGroup
		for _, it := range items {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.send(it)
			}()
		}
		wg.Wait()
	}
}

func (r *Runner) send(it store.OutboxItem) {
	var outcome string
	var cat *string
	if len(it.Body) > MaxBody {
		outcome = "gone" // never sendable; the data says payload_omitted well before this
	} else {
		// Not the loop's context: a POST that started finishes, so its outcome is recorded.
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		status, c, _ := r.client.Post(ctx, it.URL, it.HookID, it.MessageID, it.Secrets, it.Body)
		cancel()
		switch {
		case c == "":
			outcome = "ok"
		case status == 410 || status == 413:
			outcome, cat = "gone", &c
		default:
			outcome, cat = "retry", &c
		}
	}
	label := outcome
	if outcome == "retry" {
		label = *cat
	}
	r.sent.WithLabelValues(label).Inc()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.st.OutboxDone(ctx, it.ID, outcome, cat); err != nil {
		r.log.Warn("events outbox outcome not recorded", "subscription", it.HookID, "err", store.Classify(err).Unwrap())
	}
}
