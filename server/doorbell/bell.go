// Package doorbell tells live MCP sessions that work is ready. It is best effort and never the
// ledger: a todo is claimable whether or not anyone was told.
//
// One LISTEN connection per process (listen.go) hears switchboard.ring()'s pg_notify on the
// channel switchboard_doorbell (payload '*', or an endpoint id when sent by hand) and
// switchboard_revoked. On a ring the bell reads, in one query, which todos of the endpoints
// with sessions here became ready (switchboard.ready_todos from each endpoint's cursor), now
// and once more after the coalescing window, because ring() notifies at most once per
// doorbell_window_ms for the whole database. Each new ready todo goes to ONE session of its
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
	"sync"
	"sync/atomic"
	"time"

	"switchboard/server/metrics"
	"switchboard/server/store"
)

const (
	bufferSize   = 16                     // per-session notifications waiting to be written
	readLimit    = 64                     // rows per ready_todos read
	maxPages     = 8                      // ready_todos reads per ring, at most
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

	waits waitState // claim_next calls that wait (wait.go)
	again againState
	due   dueState // time-based rings (due.go)

	listening   chan struct{} // closed and replaced on each (re)connect; see Listening
	allTrailing *time.Timer   // pending re-check of every endpoint (see ringAll)

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
	s := &Session{bell: b, endpoint: endpointID, id: sessionID, send: send, buf: make(chan Params, bufferSize)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.closed = true
		close(s.buf)
		return s
	}
	ep := b.eps[endpointID]
	if ep == nil {
		ep = &endpoint{id: endpointID, seen: map[string]time.Time{}, dueSeen: map[string]dueMark{}}
		b.eps[endpointID] = ep
		b.goTracked(func() { b.startCursor(ep) })
		b.hintDueLocked() // its leases and retries join the time-based reads
	}
	ep.sessions = append(ep.sessions, s)
	b.goTracked(s.drain)
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
	var batch []*endpoint
	for _, ep := range b.eps {
		if ep.running {
			ep.dirty = true
			continue
		}
		ep.running = true
		batch = append(batch, ep)
	}
	if len(batch) > 0 {
		b.goTracked(func() { b.batchReader(batch) })
	}
}

// batchReader reads a batch of endpoints in one query, then finishes each like reader does.
func (b *Bell) batchReader(eps []*endpoint) {
	cursors := make([]store.Cursor, len(eps))
	b.mu.Lock()
	for i, ep := range eps {
		cursors[i] = store.Cursor{Endpoint: ep.id, Since: ep.since}
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
	rows, err := b.st.ReadyTodosMany(ctx, cursors, readLimit)
	cancel()
	if err != nil && b.ctx.Err() == nil {
		b.log.Warn("doorbell read failed", "endpoints", len(eps), "err", store.Classify(err).Unwrap())
	}
	for i, ep := range eps {
		more := true
		if err == nil {
			b.mu.Lock()
			last := b.absorbLocked(ep, rows[ep.id])
			b.mu.Unlock()
			more = len(rows[ep.id]) == readLimit && last.After(cursors[i].Since)
		}
		if more {
			b.read(ep) // a full page (or a failed batch): page through this one alone
		}
		b.mu.Lock()
		if ep.dirty && !b.closed {
			ep.dirty = false
			b.mu.Unlock()
			b.reader(ep)
			continue
		}
		ep.running = false
		b.mu.Unlock()
	}
}

// reader reads until no ring arrived meanwhile.
func (b *Bell) reader(ep *endpoint) {
	for {
		b.read(ep)
		b.mu.Lock()
		if ep.dirty && !b.closed {
			ep.dirty = false
			b.mu.Unlock()
			continue
		}
		ep.running = false
		b.mu.Unlock()
		return
	}
}

// read fetches the endpoint's newly ready todos and rings one session for each.
func (b *Bell) read(ep *endpoint) {
	b.mu.Lock()
	since := ep.since
	b.mu.Unlock()
	for page := 0; page < maxPages; page++ {
		ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
		rows, err := b.st.ReadyTodos(ctx, ep.id, since, readLimit)
		cancel()
		if err != nil {
			if b.ctx.Err() == nil {
				b.log.Warn("doorbell read failed", "endpoint_id", ep.id, "err", store.Classify(err).Unwrap())
			}
			return
		}
		b.mu.Lock()
		last := b.absorbLocked(ep, rows)
		b.mu.Unlock()
		// A full page may hide newer rows: continue from its last ready_at, unless the page
		// made no progress (more rows share one ready_at than a page holds).
		if len(rows) < readLimit || !last.After(since) {
			return
		}
		since = last
	}
}

// absorbLocked rings for the rows not rung yet, advances the cursor and forgets what falls
// behind it; it returns the last row's ready_at. b.mu must be held.
func (b *Bell) absorbLocked(ep *endpoint, rows []store.Ready) (last time.Time) {
	for _, r := range rows {
		last = r.ReadyAt
		if at, ok := ep.seen[r.ID]; ok && at.Equal(r.ReadyAt) {
			continue
		}
		if d, ok := ep.dueSeen[r.ID]; ok && d.attempt == r.Attempt {
			// A time-based ring announced it; the requeue that made it pending (a claim's
			// takeover, the reaper) is the same readiness.
			ep.seen[r.ID] = r.ReadyAt
			continue
		}
		if b.passLocked(ep, r) {
			ep.seen[r.ID] = r.ReadyAt
		}
	}
	if len(rows) > 0 {
		if c := last.Add(-cursorSlack); c.After(ep.since) {
			ep.since = c
		}
		for id, at := range ep.seen {
			if at.Before(ep.since) {
				delete(ep.seen, id)
			}
		}
	}
	return last
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
	if len(s.buf) == cap(s.buf) {
		b.m.DoorbellDropped.WithLabelValues("buffer_full").Inc()
		return true
	}
	select {
	case s.buf <- Message(r):
		b.recordRingLocked(ep, s, r)
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
	buf      chan Params
	streams  int  // open GET streams; guarded by bell.mu
	closed   bool // guarded by bell.mu

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
	}
}

// shut closes the buffer so the drain goroutine ends. bell.mu must be held.
func (s *Session) shut() {
	if !s.closed {
		s.closed = true
		close(s.buf)
	}
}

// drain writes queued notifications to the client, one at a time.
func (s *Session) drain() {
	b := s.bell
	for p := range s.buf {
		b.mu.Lock()
		gone := s.closed
		b.mu.Unlock()
		if gone {
			continue // discard what is left
		}
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
