package events

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchboard/server/store"
)

// Interval is how often a server runs the events tick (record, fan out) and drains the
// outbox, besides at once when the doorbell rings. Each is a few index probes when there is
// nothing to do.
const Interval = time.Second

// The sender pipeline: senders POSTs at once, fed by takes of batch rows; up to inflight
// batches are out at a time (the next is taken while the last one's POSTs run), and each
// batch's outcomes are recorded in one transaction once its POSTs are done.
const (
	senders  = 128
	batch    = 128
	inflight = 2
)

// fanChunk is the subscriptions one fan-out transaction moves: the first chunk's rows are sent
// while the next chunk is fanned out.
const fanChunk = 250

// lease is how long a taken row stays with this server: long enough for every POST out at
// once to wait its turn for a sender and run to requestTimeout (30 s with the values above).
// A take is at most batch POSTs (a group row has at most 128 members, events_group_max).
// A server that dies leaves its rows to another after this.
const lease = requestTimeout*((inflight*batch+senders-1)/senders) + 10*time.Second

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

// NewRunner builds the loop; reg (may be nil) gets switchboard_events_deliveries_total and
// switchboard_events_outbox_oldest_seconds.
func NewRunner(st *store.Store, client *Client, log *slog.Logger, reg prometheus.Registerer) *Runner {
	r := &Runner{st: st, client: client, log: log, done: make(chan struct{}), wake: make(chan struct{}, 1),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_events_deliveries_total",
			Help: "MCP Events webhook POSTs by outcome (ok, gone: 410/413, not retried; or the failure category).",
		}, []string{"outcome"})}
	if reg != nil {
		reg.MustRegister(r.sent, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "switchboard_events_outbox_oldest_seconds",
			Help: "Age of the oldest row still in the MCP Events outbox (sent when due, retried, or waiting for a suspended subscription); 0 when empty, NaN when it could not be read.",
		}, r.outboxAge))
	}
	return r
}

// outboxAge reads the outbox's oldest age at scrape time (a min() over a table that holds
// only what is still to send).
func (r *Runner) outboxAge() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	age, err := r.st.OutboxAge(ctx)
	if err != nil {
		return math.NaN()
	}
	return age
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

// Once runs one tick: record, then fan out in chunks while sending what is due, until the
// fan-out is done and nothing is due.
func (r *Runner) Once(ctx context.Context) {
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := r.st.EventsRecord(tctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("events tick failed", "err", store.Classify(err).Unwrap())
		}
		return
	}
	fanned := make(chan struct{}, 1) // a chunk is in the outbox
	fanDone := make(chan struct{})
	go func() {
		defer close(fanDone)
		for ctx.Err() == nil {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := r.st.EventsFanout(tctx, fanChunk)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("events fan-out failed", "err", store.Classify(err).Unwrap())
				}
				return
			}
			select {
			case fanned <- struct{}{}:
			default:
			}
			if n < fanChunk {
				return
			}
		}
	}()
	r.drain(ctx, fanned, fanDone)
	<-fanDone
}

// drain sends what is due until a take comes back empty after the fan-out ended (or ctx
// ends); it returns once every batch it took has its outcomes recorded (or left leased, when
// recording failed).
func (r *Runner) drain(ctx context.Context, fanned, fanDone <-chan struct{}) {
	type job struct {
		it  store.OutboxItem
		out *store.OutboxOutcome
		wg  *sync.WaitGroup
	}
	jobs := make(chan job, batch)
	var workers sync.WaitGroup
	for range senders {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range jobs {
				*j.out = r.send(j.it)
				j.wg.Done()
			}
		}()
	}
	// Nothing is taken before the first chunk is in: a take beside the fan-out only slows it.
	select {
	case <-fanned:
	case <-fanDone:
	case <-ctx.Done():
	}
	slots := make(chan struct{}, inflight)
loop:
	for ctx.Err() == nil {
		slots <- struct{}{} // at most inflight batches out: taken and not yet recorded
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		items, err := r.st.OutboxTake(tctx, batch, lease)
		cancel()
		if err != nil {
			r.log.Warn("events outbox take failed", "err", store.Classify(err).Unwrap())
			<-slots
			break
		}
		if len(items) == 0 {
			<-slots
			// Nothing due: wait for the fan-out's next chunk, or its end.
			select {
			case <-fanned:
				continue
			case <-fanDone:
				select {
				case <-fanned: // the last chunk landed after that take
					continue
				default:
					break loop
				}
			case <-ctx.Done():
				break loop
			}
		}
		outcomes := make([]store.OutboxOutcome, len(items))
		wg := new(sync.WaitGroup)
		wg.Add(len(items))
		for i, it := range items {
			jobs <- job{it, &outcomes[i], wg}
		}
		go func() {
			defer func() { <-slots }()
			wg.Wait()
			// Not the loop's context: POSTs that were made get their outcomes recorded.
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := r.st.OutboxDone(dctx, outcomes)
			cancel()
			if err != nil {
				// The rows stay leased: they are sent again when the lease runs out.
				r.log.Warn("events outbox outcomes not recorded", "rows", len(outcomes), "err", store.Classify(err).Unwrap())
			}
		}()
	}
	for range inflight { // every batch recorded
		slots <- struct{}{}
	}
	close(jobs)
	workers.Wait()
}

func (r *Runner) send(it store.OutboxItem) store.OutboxOutcome {
	o := store.OutboxOutcome{ID: it.ID, HookID: it.HookID}
	if len(it.Body) > MaxBody {
		o.Outcome = "gone" // never sendable; the data says payload_omitted well before this
	} else {
		// Not the loop's context: a POST that started finishes, so its outcome is recorded.
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		status, c, _ := r.client.Post(ctx, it.URL, it.HookID, it.MessageID, it.Secrets, it.Body)
		cancel()
		switch {
		case c == "":
			o.Outcome = "ok"
		case status == 410 || status == 413:
			o.Outcome, o.Category = "gone", &c
		default:
			o.Outcome, o.Category = "retry", &c
		}
	}
	label := o.Outcome
	if o.Outcome == "retry" {
		label = *o.Category
	}
	r.sent.WithLabelValues(label).Inc()
	return o
}
