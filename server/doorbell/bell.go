// Package doorbell tells live MCP sessions that work is ready. It is best effort and never the
// ledger: a todo is claimable whether or not anyone was told.
//
// One LISTEN connection per process (listen.go) hears switchboard.ring()'s pg_notify on the
// channel switchboard_doorbell (payload '*', or an endpoint id when sent by hand) and
// switchboard_revoked. On a ring the bell reads, in one walk of the todos_ready index, which
// todos became ready since its endpoints' cursors (switchboard.ready_todos_since), now and once
// more after the coalescing window, because ring() notifies at most once per doorbell_window_ms
// for the whole database. Each read moves the cursors up to its own clock (less a second for
// transactions that commit late), so a read costs what became ready since, not the number of
// endpoints with sessions here. Each new ready todo goes to ONE session of its
// endpoint with an open GET stream (round-robin) through that session's buffer of 16; a full
// buffer drops the notification. A session whose stream opens is rung for the endpoint's
// oldest pending todos. Nothing waits on a client.
//
// Around that: a ready todo goes first to a claim_next call of its endpoint that waits for work
// (wait.go), and then rings no session; a ring that went to a session which made no tool call
// since is sent again on another session after ring_again_seconds (again.go); and todos that
// time makes claimable — expired leases, elapsed retry windows — are found by time-based reads
// at the moment they become claimable (due.go).
package doorbell

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"switchboard/server/metrics"
	"switchboard/server/store"
)

const (
	bufferSize   = 16                     // per-session notifications waiting to be written
	readLimit    = 256                    // rows per ready_todos_since read
	maxPages     = 8                      // ready_todos_since reads per ring, at most
	cursorSlack  = time.Second            // ready_at is a transaction's start time: re-read this far back
	writeTimeout = 5 * time.Second        // one notification write
	readTimeout  = 10 * time.Second       // one doorbell SQL read
	attachRing   = 3                      // oldest pending todos rung on attach
	cursorStart  = 100 * time.Millisecond // a new endpoint's cursor: this long before attach
)

// Sender writes one notification to a session's client.
type Sender func(ctx context.Context, p Params) error

// Config configures a Bell.
type Config struct {
	// Window is the trailing re-check delay; 0 reads doorbell_window_ms from the settings on
	// each (re)connect.
	Window time.Duration
	// OnRevoked is called (on its own goroutine) when an endpoint is revoked.
	OnRevoked func(endpointID string)
	// MaxWaiting caps the waiting claim_next calls of one endpoint here (0: DefaultMaxWaiting).
	MaxWaiting int
	Log        *slog.Logger
	Metrics    *metrics.Metrics
}

// Bell routes ready todos to sessions. Create with New, then Start; Close stops it.
type Bell struct {
	st  *store.Store
	cfg Config
	log *slog.Logger
	m   *metrics.Metrics

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	window    time.Duration
	ringAgain time.Duration        // ring_again_seconds (again.go)
	waitMax   time.Duration        // claim_wait_max_seconds (wait.go)
	eps       map[string]*endpoint // endpoints with live sessions here
	list      []*endpoint          // the same, for the '*' reads (a slice walks faster than a map)

	waits waitState // claim_next calls that wait (wait.go)
	again againState
	due   dueState // time-based rings (due.go)

	listening   chan struct{} // closed and replaced on each (re)connect; see Listening
	allTrailing *time.Timer   // pending re-check of every endpoint (see ringAll)
	batches     sync.Pool     // *[]*endpoint of readAllLocked, reused: a signal reads them all twice

	connects atomic.Uint64 // LISTEN connections made so far
	feed     atomic.Uint64 // the current connection's number while it is up, else 0 (see Epoch)
}

// endpoint is the bell's state for one endpoint with local sessions. Guarded by Bell.mu.
type endpoint struct {
	id       string
	sessions []*Session
	rr       int
	since    time.Time            // read cursor (zero: the last second by the database clock)
	seen     map[string]time.Time // todo id → ready_at already rung; pruned below since
	running  bool                 // a reader goroutine is active
	dirty    bool                 // ring arrived while reading: read again
	trailing *time.Timer          // pending re-check after the coalescing window

	waiters    []*Waiter          // waiting calls not woken now, in arrival order (wait.go)
	allWaiters []*Waiter          // every waiting call of the endpoint here, woken or not
	rings      []ring             // rings sent, oldest first, until answered or rung again (again.go)
	againAt    []time.Time        // when the last rings again went out (at most againPerWindow)
	dueSeen    map[string]dueMark // todos a time-based ring announced (due.go)
}

// New makes a bell over the store.
func New(st *store.Store, cfg Config) *Bell {
	ctx, cancel := context.WithCancel(context.Background())
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := cfg.Metrics
	if m == nil {
		m = metrics.New()
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	w := cfg.Window
	if w <= 0 {
		w = 60 * time.Millisecond
	}
	return &Bell{
		st: st, cfg: cfg, log: log, m: m, ctx: ctx, cancel: cancel, window: w,
		ringAgain: defaultRingAgain, waitMax: defaultWaitMax,
		eps: map[string]*endpoint{}, listening: make(chan struct{}),
	}
}

// Close stops the listener and every goroutine of the bell and waits for them. Sessions stay
// attached but inert; closing them afterwards is harmless.
func (b *Bell) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.wg.Wait()
		return
	}
	b.closed = true
	b.cancel()
	if b.allTrailing != nil {
		b.allTrailing.Stop()
	}
	b.stopTimersLocked()
	for _, ep := range b.eps {
		if ep.trailing != nil {
			ep.trailing.Stop()
			ep.trailing = nil
		}
		for _, s := range ep.sessions {
			s.shut()
		}
		b.endWaitersLocked(ep, nil, ErrWaitEnded)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// goTracked runs f on a goroutine that Close waits for; false when the bell is closed.
// b.mu must be held.
func (b *Bell) goTracked(f func()) bool {
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// Attach registers a session of an endpoint. send writes to its client.
func (b *Bell) Attach(endpointID, sessionID string, send Sender) *Session {
	s := &Session{bell: b, endpoint: endpointID, id: sessionID, send: send}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.closed = true
		return s
	}
	ep := b.eps[endpointID]
	if ep == nil {
		ep = &endpoint{id: endpointID, seen: map[string]time.Time{}, dueSeen: map[string]dueMark{}}
		b.eps[endpointID] = ep
		b.list = append(b.list, ep)
		b.goTracked(func() { b.startCursor(ep) })
		b.hintDueLocked() // its leases and retries join the time-based reads
	}
	ep.sessions = append(ep.sessions, s)
	return s
}

// startCursor starts a new endpoint's read cursor at the database's now: the NOTIFY path rings
// what becomes ready from here on; the backlog is the attach ring's (oldest pending).
func (b *Bell) startCursor(ep *endpoint) {
	if b.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
	now, err := b.st.Now(ctx)
	cancel()
	if err != nil {
		return // the zero cursor's one-second look back will do
	}
	b.mu.Lock()
	if ep.since.IsZero() {
		ep.since = now.Add(-cursorStart)
	}
	b.mu.Unlock()
}

// Ring makes the bell look for newly ready todos of an endpoint (as a doorbell NOTIFY does),
// and once more after the coalescing window.
func (b *Bell) Ring(endpointID string) { b.ring(endpointID, true) }

func (b *Bell) ring(endpointID string, trailing bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ep := b.eps[endpointID]
	if ep == nil || b.closed {
		return
	}
	if trailing {
		// Re-check one window after the latest signal: ring() stays silent for that long, so
		// todos created meanwhile are only found by this read.
		b.rearm(&ep.trailing, func() { b.ring(endpointID, false) })
	}
	if ep.running {
		ep.dirty = true
		return
	}
	ep.running = true
	b.goTracked(func() { b.reader(ep) })
}

// ringAll re-reads every endpoint with sessions here — in one query — now and once more a
// window after the latest call: a '*' doorbell signal (ring() coalesces for the whole
// database), and the listener's (re)connect, after which a signal sent while it was away may
// have silenced later ones.
func (b *Bell) ringAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.rearm(&b.allTrailing, b.readAll)
	b.readAllLocked()
}

// rearm replaces the timer in *slot with one that runs fn a window (plus a margin) from now; the
// timer empties the slot when it fires, unless a later rearm replaced it. b.mu must be held.
func (b *Bell) rearm(slot **time.Timer, fn func()) {
	if *slot != nil {
		(*slot).Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(b.window+10*time.Millisecond, func() {
		b.mu.Lock()
		if *slot == t {
			*slot = nil
		}
		b.mu.Unlock()
		fn()
	})
	*slot = t
}

func (b *Bell) readAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.readAllLocked()
}

// readAllLocked starts one batch read of every endpoint not being read already (those get
// their dirty flag). b.mu must be held.
func (b *Bell) readAllLocked() {
	if b.closed {
		return
	}
	buf, _ := b.batches.Get().(*[]*endpoint)
	if buf == nil {
		buf = new([]*endpoint)
	}
	batch := (*buf)[:0]
	for _, ep := range b.list {
		if ep.running {
			ep.dirty = true
			continue
		}
		ep.running = true
		batch = append(batch, ep)
	}
	*buf = batch
	if len(batch) == 0 || !b.goTracked(func() {
		b.batchReader(batch)
		clear(*buf) // no endpoint kept alive by the pool
		b.batches.Put(buf)
	}) {
		b.batches.Put(buf)
	}
}

// batchReader reads a batch of endpoints in one walk, again for those rung meanwhile (dirty),
// until none is.
func (b *Bell) batchReader(eps []*endpoint) {
	for len(eps) > 0 {
		b.readSince(eps)
		again := eps[:0]
		b.mu.Lock()
		for _, ep := range eps {
			if ep.dirty && !b.closed {
				ep.dirty = false
				again = append(again, ep)
				continue
			}
			ep.running = false
		}
		b.mu.Unlock()
		eps = again
	}
}

// reader reads one endpoint until no ring arrived meanwhile.
func (b *Bell) reader(ep *endpoint) { b.batchReader([]*endpoint{ep}) }

// readSince fetches what became ready since the earliest cursor of eps, across all endpoints in
// one walk (switchboard.ready_todos_since), rings one session for each new todo, and moves every
// cursor of eps up to the read's clock less cursorSlack. The cost is the todos that became ready
// since, not the number of endpoints with sessions here, and an endpoint holding an old
// unclaimed todo is not read again on every signal. It allocates nothing per endpoint: a '*'
// signal reads for every endpoint, twice.
func (b *Bell) readSince(eps []*endpoint) {
	b.mu.Lock()
	var since time.Time // zero (the last second) when any cursor is unset
	for i, ep := range eps {
		if i == 0 || (!since.IsZero() && (ep.since.IsZero() || ep.since.Before(since))) {
			since = ep.since
		}
	}
	b.mu.Unlock()
	for page := 0; page < maxPages; page++ {
		ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
		rows, now, err := b.st.ReadySince(ctx, since, readLimit)
		cancel()
		if err != nil {
			if b.ctx.Err() == nil {
				b.log.Warn("doorbell read failed", "endpoints", len(eps), "err", store.Classify(err).Unwrap())
			}
			return
		}
		full := len(rows) == readLimit
		covered := now.Add(-cursorSlack) // every cursor of eps may move up to here
		if full {
			covered = rows[len(rows)-1].ReadyAt.Add(-cursorSlack)
		}
		b.mu.Lock()
		// Rows of any endpoint with sessions here are rung (a todo is rung once: seen), not only
		// those of eps; rows behind an endpoint's cursor were read before.
		for _, r := range rows {
			if ep := b.eps[r.Endpoint]; ep != nil && (ep.since.IsZero() || !r.ReadyAt.Before(ep.since)) {
				b.absorbOneLocked(ep, r)
			}
		}
		for _, ep := range eps {
			b.advanceLocked(ep, covered)
		}
		b.mu.Unlock()
		// A full page may hide newer rows: continue from its last ready_at, unless the page
		// made no progress (more rows share one ready_at than a page holds).
		if !full || !rows[len(rows)-1].ReadyAt.After(since) {
			return
		}
		since = rows[len(rows)-1].ReadyAt
	}
}

// absorbOneLocked rings for a row not rung yet. b.mu must be held.
func (b *Bell) absorbOneLocked(ep *endpoint, r store.Ready) {
	if at, ok := ep.seen[r.ID]; ok && at.Equal(r.ReadyAt) {
		return
	}
	if d, ok := ep.dueSeen[r.ID]; ok && d.attempt == r.Attempt {
		// A time-based ring announced it; the requeue that made it pending (a claim's
		// takeover, the reaper) is the same readiness.
		ep.seen[r.ID] = r.ReadyAt
		return
	}
	if b.passLocked(ep, r) {
		ep.seen[r.ID] = r.ReadyAt
	}
}

// advanceLocked moves the endpoint's cursor up to c (never back) and forgets the rung todos that
// fall behind it. b.mu must be held.
func (b *Bell) advanceLocked(ep *endpoint, c time.Time) {
	if !c.After(ep.since) {
		return
	}
	ep.since = c
	if len(ep.seen) == 0 {
		return // an empty map still costs a walk of its buckets: most endpoints, every read
	}
	for id, at := range ep.seen {
		if at.Before(c) {
			delete(ep.seen, id)
		}
	}
}

// offerLocked queues a notification for a session: to (when set) or the next one round-robin,
// preferring sessions with an open stream. It reports whether the todo counts as rung: false
// when no session can carry it now (without an open GET stream a notification has nowhere to
// go; the attach ring covers the backlog once a stream opens). b.mu must be held.
func (b *Bell) offerLocked(ep *endpoint, to *Session, r store.Ready) bool {
	s := to
	if s == nil {
		s = pick(ep)
		if s == nil || s.streams == 0 {
			return false
		}
	}
	if s.closed {
		return false
	}
	if s.buf == nil {
		s.buf = make(chan Params, bufferSize) // on the first ring: most sessions idle
	}
	if len(s.buf) == cap(s.buf) {
		b.m.DoorbellDropped.WithLabelValues("buffer_full").Inc()
		return true
	}
	select {
	case s.buf <- Message(r):
		b.recordRingLocked(ep, s, r)
		if !s.draining {
			s.draining = b.goTracked(s.drain)
		}
	default:
		b.m.DoorbellDropped.WithLabelValues("buffer_full").Inc()
	}
	return true
}

func pick(ep *endpoint) *Session {
	n := len(ep.sessions)
	if n == 0 {
		return nil
	}
	for i := 0; i < n; i++ {
		s := ep.sessions[(ep.rr+i)%n]
		if s.streams > 0 {
			ep.rr = (ep.rr + i + 1) % n
			return s
		}
	}
	s := ep.sessions[ep.rr%n]
	ep.rr = (ep.rr + 1) % n
	return s
}

// attached rings a session whose GET stream just opened for the endpoint's oldest pending
// todos, except those just rung to a session.
func (b *Bell) attached(s *Session) {
	ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
	rows, err := b.st.OldestPending(ctx, s.endpoint, attachRing)
	cancel()
	if err != nil {
		if b.ctx.Err() == nil {
			b.log.Warn("doorbell attach read failed", "endpoint_id", s.endpoint, "err", store.Classify(err).Unwrap())
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ep := b.eps[s.endpoint]
	if ep == nil {
		return
	}
	for _, r := range rows {
		if at, ok := ep.seen[r.ID]; ok && at.Equal(r.ReadyAt) {
			continue // just rung to a session (maybe this one): no double ring
		}
		if d, ok := ep.dueSeen[r.ID]; ok && d.attempt == r.Attempt {
			continue
		}
		if !r.ReadyAt.Before(ep.since) {
			ep.seen[r.ID] = r.ReadyAt
		}
		b.offerLocked(ep, s, r)
	}
}

// Session is one MCP session as the bell sees it.
type Session struct {
	bell     *Bell
	endpoint string
	id       string
	send     Sender
	buf      chan Params // made on the first ring; guarded by bell.mu
	streams  int         // open GET streams; guarded by bell.mu
	closed   bool        // guarded by bell.mu
	draining bool        // a drain goroutine is running; guarded by bell.mu

	lastCall atomic.Int64 // when the session last made a tool call (UnixNano; see Called)
}

// StreamOpened records an open GET stream (the channel's carrier) and rings the session for
// the endpoint's oldest pending todos.
func (s *Session) StreamOpened() {
	b := s.bell
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.closed {
		return
	}
	s.streams++
	b.goTracked(func() { b.attached(s) })
}

// StreamClosed records that a GET stream ended.
func (s *Session) StreamClosed() {
	b := s.bell
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.streams > 0 {
		s.streams--
	}
}

// Close detaches the session; queued notifications are discarded.
func (s *Session) Close() {
	b := s.bell
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.closed {
		return
	}
	s.shut()
	ep := b.eps[s.endpoint]
	if ep == nil {
		return
	}
	b.endWaitersLocked(ep, s, ErrWaitEnded)
	for i, x := range ep.sessions {
		if x == s {
			ep.sessions = append(ep.sessions[:i], ep.sessions[i+1:]...)
			break
		}
	}
	if len(ep.sessions) == 0 {
		if ep.trailing != nil {
			ep.trailing.Stop()
		}
		delete(b.eps, s.endpoint)
		if i := slices.Index(b.list, ep); i >= 0 {
			last := len(b.list) - 1
			b.list[i], b.list[last] = b.list[last], nil
			b.list = b.list[:last]
		}
	}
}

// shut marks the session closed: its drain goroutine, if any, discards what is left and ends.
// bell.mu must be held.
func (s *Session) shut() { s.closed = true }

// drain writes queued notifications to the client, one at a time. It runs only while there is
// something to write (offerLocked starts it), so an idle session costs no goroutine.
func (s *Session) drain() {
	b := s.bell
	for {
		var p Params
		got := false
		b.mu.Lock()
		select {
		case p = <-s.buf:
			got = true
		default:
		}
		if s.closed || !got {
			for len(s.buf) > 0 { // closed: discard what is left
				<-s.buf
			}
			s.draining = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(b.ctx, writeTimeout)
		err := s.send(ctx, p)
		cancel()
		if err != nil {
			b.m.DoorbellDropped.WithLabelValues("write").Inc()
			continue
		}
		b.m.DoorbellSent.Inc()
	}
}
