// Package doorbell tells live MCP sessions that work is ready. It is best effort and never the
// ledger: a todo is claimable whether or not anyone was told.
//
// One LISTEN connection per process (listen.go) hears switchboard.ring()'s pg_notify on the
// channel switchboard_doorbell (payload '*', or an endpoint id when sent by hand); it also
// carries switchboard_revoked, which it passes to the revocation feed (server/revocation, whose
// epochs and notifications decide when mcpapi may skip a credential lookup) without reading it.
// On a ring the bell reads, in one walk of the todos_ready index, which
// todos of any endpoint became ready since its cursor (switchboard.ready_todos_since), now,
// once more after the coalescing window, because ring() notifies at most once per
// doorbell_window_ms for the whole database, and a last time half a second after that, for a
// transaction that rang inside the window but committed late. Each read moves the one cursor up
// to its own clock (less a second for transactions that commit late), so a read costs what
// became ready since, not the number of endpoints with sessions here: nothing on the signal's
// path walks them. Each new ready todo goes to ONE session of its endpoint with an open GET
// stream (round-robin) through that session's buffer of 16; a full buffer drops the
// notification. A session whose stream opens is rung for the endpoint's oldest pending todos.
// Nothing waits on a client.
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
	"switchboard/server/revocation"
	"switchboard/server/store"
)

const (
	bufferSize   = 16                     // per-session notifications waiting to be written
	readLimit    = 256                    // rows per ready_todos_since read
	maxPages     = 8                      // ready_todos_since reads per ring, at most
	cursorSlack  = time.Second            // ready_at is a transaction's start time: re-read this far back
	lateRead     = cursorSlack / 2        // the last re-read comes this long after the window's, for a late commit (ringAll)
	writeTimeout = 5 * time.Second        // one notification write
	readTimeout  = 10 * time.Second       // one doorbell SQL read
	attachRing   = 3                      // oldest pending todos rung on attach
	floorLead    = 100 * time.Millisecond // a new endpoint's floor: this long before attach
)

// Sender writes one notification to a session's client.
type Sender func(ctx context.Context, p Params) error

// Config configures a Bell.
type Config struct {
	// Window is the trailing re-check delay; 0 reads doorbell_window_ms from the settings on
	// each (re)connect.
	Window time.Duration
	// Revocations is the revocation feed the LISTEN connection carries (nil: none): it gets
	// each switchboard_revoked notification (on its own goroutine) and every connect and
	// disconnect.
	Revocations *revocation.Feed
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
	list      []*endpoint          // the same, for the time-based reads' endpoint list

	// The NOTIFY path's reads (readSince): one cursor for every endpoint here.
	cursor    time.Time            // database clock: rows ready before it were read (zero: the last second)
	seen      map[string]time.Time // todo id → ready_at already rung, at or after cursor
	reading   bool                 // a reader goroutine is active
	readAgain bool                 // a signal arrived while reading: read again

	// The database clock as a read last saw it, and when that read returned (this process's
	// monotonic clock): a new endpoint's floor is set from them at attach (dbNowLocked).
	clock   time.Time
	clockAt time.Time

	onReady  func(endpointID, queue string) // see OnReady; set before Start
	onSignal func()                         // see OnSignal; set before Start

	waits waitState // claim_next calls that wait (wait.go)
	again againState
	due   dueState // time-based rings (due.go)

	listening chan struct{} // closed and replaced on each (re)connect; see Listening
	trailing  *time.Timer   // pending re-check after the coalescing window (see ringAll)
	late      *time.Timer   // pending re-check for a late commit (see ringAll)
}

// endpoint is the bell's state for one endpoint with local sessions. Guarded by Bell.mu.
type endpoint struct {
	id       string
	sessions []*Session
	rr       int
	// floor: todos that became ready before it (the first attach, by the database clock) are
	// the attach ring's, not the NOTIFY path's (zero until known: no floor).
	floor time.Time

	waiters    []*Waiter   // waiting calls not woken now, in arrival order (wait.go)
	allWaiters []*Waiter   // every waiting call of the endpoint here, woken or not
	rings      []*ring     // rings sent, oldest first, until answered or rung again (again.go)
	againAt    []time.Time // when the last rings again went out (at most againPerWindow)
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
		eps: map[string]*endpoint{}, seen: map[string]time.Time{}, listening: make(chan struct{}),
		due: dueState{seen: map[string]dueMark{}},
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
	for _, t := range []*time.Timer{b.trailing, b.late} {
		if t != nil {
			t.Stop()
		}
	}
	b.stopTimersLocked()
	for _, ep := range b.eps {
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

// OnReady sets a function told, under the bell's lock (so it must not block or call the bell),
// of each todo that the bell announces: a new ready todo, a retry that came due, an expired
// lease, in a queue of an endpoint with a session here. Call it before Start.
func (b *Bell) OnReady(f func(endpointID, queue string)) { b.onReady = f }

// OnSignal sets a function called on the LISTEN loop for every doorbell signal (work became
// ready somewhere in the database): it must return at once. The MCP Events runner wakes on it.
// Call it before Start.
func (b *Bell) OnSignal(f func()) { b.onSignal = f }

// Window is the doorbell's coalescing window (doorbell_window_ms).
func (b *Bell) Window() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.window
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
		ep = &endpoint{id: endpointID}
		b.eps[endpointID] = ep
		b.list = append(b.list, ep)
		// The floor is known before any read can see the endpoint: a read that ran first, with
		// no floor, rang the endpoint's backlog of the last second as new work (found under load
		// by TestDoorbellRingOnAttach).
		if now, ok := b.dbNowLocked(); ok {
			ep.floor = now.Add(-floorLead)
		} else {
			b.goTracked(func() { b.startCursor(ep) })
		}
		b.hintDueLocked() // its leases and retries join the time-based reads
	}
	ep.sessions = append(ep.sessions, s)
	return s
}

// startCursor sets a new endpoint's floor just before the database's now: the NOTIFY path rings
// what becomes ready from here on; the backlog is the attach ring's (oldest pending). Attach
// calls it only when the bell has not seen the database's clock (readClock failed).
func (b *Bell) startCursor(ep *endpoint) {
	now, ok := b.readClock()
	if !ok {
		return // no floor: at most a second of backlog is rung twice
	}
	b.mu.Lock()
	ep.floor = now.Add(-floorLead)
	b.mu.Unlock()
}

// readClock reads the database's clock (on every LISTEN connect: a failover may bring another
// server's) and records it.
func (b *Bell) readClock() (time.Time, bool) {
	if b.st == nil {
		return time.Time{}, false
	}
	ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
	now, err := b.st.Now(ctx)
	cancel()
	if err != nil {
		return time.Time{}, false
	}
	b.mu.Lock()
	b.sawClockLocked(now)
	b.mu.Unlock()
	return now, true
}

// sawClockLocked records the database clock a read returned. b.mu must be held.
func (b *Bell) sawClockLocked(now time.Time) {
	b.clock, b.clockAt = now, time.Now()
}

// dbNowLocked is the database's now as of the last read plus the time since: a little early, by
// that read's trip back, which only moves a floor back (a backlog todo rung as new, never a new
// one missed). False before any read. b.mu must be held.
func (b *Bell) dbNowLocked() (time.Time, bool) {
	if b.clockAt.IsZero() {
		return time.Time{}, false
	}
	return b.clock.Add(time.Since(b.clockAt)), true
}

// Ring makes the bell look for newly ready todos of an endpoint (as a doorbell NOTIFY naming
// it does), and once more after the coalescing window. The read covers every endpoint here.
func (b *Bell) Ring(endpointID string) {
	b.mu.Lock()
	ok := b.eps[endpointID] != nil
	b.mu.Unlock()
	if ok {
		b.ringAll()
	}
}

// ringAll reads what became ready, now and once more a window after the latest call: a '*'
// doorbell signal (ring() coalesces for the whole database, so todos created during the
// window are only found by the second read), and the listener's (re)connect, after which a
// signal sent while it was away may have silenced later ones. A last read lateRead after the
// second finds a todo whose transaction ran ring() inside the window but committed after the
// second read (a commit waiting on a slow fsync): nothing else would ring it before the next
// signal (TestDoorbellLateCommitRings; a full `make test` run missed one so).
func (b *Bell) ringAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.rearm(&b.trailing, b.window+10*time.Millisecond, b.readAll)
	b.rearm(&b.late, b.window+lateRead, b.readAll)
	b.readAllLocked()
}

// rearm replaces the timer in *slot with one that runs fn after d; the timer empties the slot
// when it fires, unless a later rearm replaced it. b.mu must be held.
func (b *Bell) rearm(slot **time.Timer, d time.Duration, fn func()) {
	if *slot != nil {
		(*slot).Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
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

// readAllLocked starts a reader, or asks the running one to read again. With no endpoint
// here there is nobody to ring: the cursor restarts at the last second, so the first read
// after an idle spell does not page through what became ready meanwhile. b.mu must be held.
func (b *Bell) readAllLocked() {
	switch {
	case b.closed:
	case len(b.eps) == 0:
		b.cursor = time.Time{}
		clear(b.seen)
	case b.reading:
		b.readAgain = true
	default:
		b.reading = true
		b.goTracked(b.reader)
	}
}

// reader reads until no signal arrived meanwhile.
func (b *Bell) reader() {
	for {
		b.readSince()
		b.mu.Lock()
		if !b.readAgain || b.closed {
			b.reading = false
			b.mu.Unlock()
			return
		}
		b.readAgain = false
		b.mu.Unlock()
	}
}

// readSince fetches what became ready since the cursor, across all endpoints in one walk
// (switchboard.ready_todos_since), rings one session for each new todo of an endpoint here,
// and moves the cursor up to the read's clock less cursorSlack. Its cost is the todos that
// became ready since, not the endpoints with sessions here.
func (b *Bell) readSince() {
	b.mu.Lock()
	since := b.cursor
	b.mu.Unlock()
	for page := 0; page < maxPages; page++ {
		ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
		rows, now, err := b.st.ReadySince(ctx, since, readLimit)
		cancel()
		if err != nil {
			if b.ctx.Err() == nil {
				b.log.Warn("doorbell read failed", "err", store.Classify(err).Unwrap())
			}
			return
		}
		full := len(rows) == readLimit
		covered := now.Add(-cursorSlack) // the cursor may move up to here
		if full {
			covered = rows[len(rows)-1].ReadyAt.Add(-cursorSlack)
		}
		b.mu.Lock()
		b.sawClockLocked(now)
		for _, r := range rows {
			if ep := b.eps[r.Endpoint]; ep != nil && !r.ReadyAt.Before(ep.floor) {
				b.absorbOneLocked(ep, r)
			}
		}
		b.advanceLocked(covered)
		b.mu.Unlock()
		// A full page may hide newer rows: continue from its last ready_at, unless the page
		// made no progress (more rows share one ready_at than a page holds).
		if !full || !rows[len(rows)-1].ReadyAt.After(since) {
			return
		}
		since = rows[len(rows)-1].ReadyAt
	}
}

// advanceLocked moves the cursor up to c (never back) and forgets the rung todos that fall
// behind it: no read returns them again. b.mu must be held.
func (b *Bell) advanceLocked(c time.Time) {
	if !c.After(b.cursor) {
		return
	}
	b.cursor = c
	for id, at := range b.seen {
		if at.Before(c) {
			delete(b.seen, id)
		}
	}
}

// absorbOneLocked rings for a row not rung yet. b.mu must be held.
func (b *Bell) absorbOneLocked(ep *endpoint, r store.Ready) {
	if at, ok := b.seen[r.ID]; ok && at.Equal(r.ReadyAt) {
		return
	}
	if d, ok := b.due.seen[r.ID]; ok && d.attempt == r.Attempt {
		// A time-based ring announced it; the requeue that made it pending (a claim's
		// takeover, the reaper) is the same readiness.
		b.seen[r.ID] = r.ReadyAt
		return
	}
	if b.passLocked(ep, r) {
		b.seen[r.ID] = r.ReadyAt
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
		if at, ok := b.seen[r.ID]; ok && at.Equal(r.ReadyAt) {
			continue // just rung to a session (maybe this one): no double ring
		}
		if d, ok := b.due.seen[r.ID]; ok && d.attempt == r.Attempt {
			continue
		}
		if !r.ReadyAt.Before(b.cursor) {
			b.seen[r.ID] = r.ReadyAt // a NOTIFY read may still return it
			// and then skips it as rung: resource subscribers hear of it here instead.
			if b.onReady != nil {
				b.onReady(ep.id, r.Queue)
			}
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
		for _, rg := range ep.rings {
			rg.gone = true
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
