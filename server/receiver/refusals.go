package receiver

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchboard/server/receiver/provider"
	"switchboard/server/store"
)

// refusalEvery bounds the writes of refusal counts: at most one switchboard.webhook_refused
// call per webhook per interval per process, however fast a sender holding the ingest URL sends
// deliveries that fail. A refusal costs a map update here; the counts in between are added up
// and written together when the interval has passed (the first refusal after a quiet interval
// is written at once). Counts not yet written when the process stops are lost (at most one
// interval's).
const refusalEvery = time.Second

// refusalMapMax: past this many remembered webhooks, entries with nothing pending and no write
// within the interval are dropped (they carry no state the rate bound still needs).
const refusalMapMax = 4096

type refusalLog struct {
	st      *store.Store
	log     *slog.Logger
	counter *prometheus.CounterVec // labels source, reason; may be nil
	writes  prometheus.Counter     // may be nil

	mu    sync.Mutex
	hooks map[string]*pendingRefusals
}

type pendingRefusals struct {
	counts     [4]int64 // in the order of provider.Reasons
	lastAt     time.Time
	lastReason string
	lastID     string
	written    time.Time // when the last write was started
	armed      bool      // a write is scheduled
}

// add counts one refused delivery of a webhook.
func (l *refusalLog) add(hookID, source, reason, deliveryID string) {
	if l.counter != nil {
		l.counter.WithLabelValues(source, reason).Inc()
	}
	i := slices.Index(provider.Reasons, reason)
	if i < 0 {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hooks == nil {
		l.hooks = map[string]*pendingRefusals{}
	}
	p := l.hooks[hookID]
	if p == nil {
		if len(l.hooks) >= refusalMapMax {
			l.sweep(now)
		}
		p = &pendingRefusals{}
		l.hooks[hookID] = p
	}
	p.counts[i]++
	p.lastAt, p.lastReason, p.lastID = now, reason, deliveryID
	if p.armed {
		return
	}
	p.armed = true
	time.AfterFunc(max(0, refusalEvery-now.Sub(p.written)), func() { l.flush(hookID) })
}

func (l *refusalLog) sweep(now time.Time) {
	for id, p := range l.hooks {
		if !p.armed && now.Sub(p.written) >= refusalEvery {
			delete(l.hooks, id)
		}
	}
}

// flush writes what a webhook's refusals added up to since its last write.
func (l *refusalLog) flush(hookID string) {
	l.mu.Lock()
	p := l.hooks[hookID]
	got := *p
	p.counts, p.armed, p.written = [4]int64{}, false, time.Now()
	l.mu.Unlock()

	if l.writes != nil {
		l.writes.Inc()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.st.WebhookRefused(ctx, hookID, store.Refusals{
		BadSignature: got.counts[0], StaleTimestamp: got.counts[1], TooLarge: got.counts[2], Unparseable: got.counts[3],
		LastAt: got.lastAt, LastReason: got.lastReason, LastDeliveryID: got.lastID})
	if err != nil {
		l.log.Warn("refusal counts not recorded", "webhook_id", hookID, "err", store.Classify(err).Unwrap())
	}
}
