package doorbell

import (
	"context"
	"time"

	"switchboard/server/revocation"
	"switchboard/server/store"
)

// Channels of switchboard.ring() and switchboard.settings_set(); the connection also carries
// the revocation feed's (revocation.Channel).
const (
	channelDoorbell = "switchboard_doorbell"
	channelSettings = "switchboard_settings"
	// ApplicationName names the LISTEN connection in pg_stat_activity.
	ApplicationName = "switchboard-doorbell"
)

// Start runs the LISTEN connection until Close.
func (b *Bell) Start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.goTracked(b.listen)
	b.goTracked(b.refreshSettings)
}

// Listening returns a channel that is closed once the LISTEN connection is up (the next time it
// comes up, if it is down now). For tests and readiness.
func (b *Bell) Listening() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.listening
}

// listen keeps one connection LISTENing, reconnecting with backoff. After every (re)connect it
// re-reads the ready todos of every endpoint with sessions here, since notifications sent while
// it was away are lost.
func (b *Bell) listen() {
	backoff := 100 * time.Millisecond
	for b.ctx.Err() == nil {
		conn, err := b.connect()
		if err != nil {
			if b.ctx.Err() != nil {
				return
			}
			b.log.Warn("doorbell listen connection failed", "err", err, "retry_in", backoff.String())
			select {
			case <-time.After(backoff):
			case <-b.ctx.Done():
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		b.cfg.Revocations.Connected()
		b.m.DoorbellReconnects.Inc()
		b.refreshWindow()
		b.readClock() // before Listening: the first endpoint's floor is set from it at attach
		b.mu.Lock()
		close(b.listening)
		b.mu.Unlock()
		b.ringAll()

		err = b.wait(conn)

		b.cfg.Revocations.Disconnected()
		b.mu.Lock()
		b.listening = make(chan struct{})
		b.mu.Unlock()
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
		if b.ctx.Err() != nil {
			return
		}
		b.log.Warn("doorbell listen connection lost; reconnecting", "err", err)
	}
}

func (b *Bell) connect() (*store.Listener, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return b.st.Listen(ctx, ApplicationName, channelDoorbell, revocation.Channel, channelSettings)
}

// wait dispatches notifications until the connection fails or the bell closes.
func (b *Bell) wait(conn *store.Listener) error {
	for {
		channel, payload, err := conn.Wait(b.ctx)
		if err != nil {
			return err
		}
		switch channel {
		case channelDoorbell:
			// switchboard.ring() coalesces per database: '*' means "some work became ready".
			if b.onSignal != nil {
				b.onSignal()
			}
			if payload == "*" {
				b.ringAll()
			} else {
				b.Ring(payload)
			}
		case channelSettings:
			// settings_set() changed a tunable: read the doorbell's again, off this loop.
			b.mu.Lock()
			b.goTracked(b.refreshWindow)
			b.mu.Unlock()
		case revocation.Channel:
			if f := b.cfg.Revocations; f != nil {
				b.mu.Lock()
				b.goTracked(func() { f.Deliver(payload) })
				b.mu.Unlock()
			}
		}
	}
}

// settingsEvery is how often the doorbell's settings are read again besides each (re)connect
// and each switchboard_settings notification: the backstop for a change made without
// settings_set() (a plain UPDATE) or a notification lost with its connection.
const settingsEvery = 30 * time.Second

// refreshWindow reads the doorbell's settings: doorbell_window_ms (unless the window is
// configured), ring_again_seconds and claim_wait_max_seconds.
func (b *Bell) refreshWindow() {
	ctx, cancel := context.WithTimeout(b.ctx, readTimeout)
	defer cancel()
	st, err := b.st.ReadDoorbellSettings(ctx)
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg.Window <= 0 && st.Window > 0 {
		b.window = st.Window
	}
	if st.RingAgain > 0 && st.RingAgain != b.ringAgain {
		b.ringAgain = st.RingAgain
		b.retimeRingsLocked()
	}
	if st.HasWait {
		b.waitMax = st.WaitMax
	}
}

// refreshSettings re-reads the settings every settingsEvery until Close.
func (b *Bell) refreshSettings() {
	t := time.NewTicker(settingsEvery)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			b.refreshWindow()
		}
	}
}

// Settings are the doorbell's settings in force: the coalescing window, ring_again_seconds and
// claim_wait_max_seconds.
func (b *Bell) Settings() (window, ringAgain, waitMax time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.window, b.ringAgain, b.waitMax
}
