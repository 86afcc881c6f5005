// Package revocation is the feed that tells this process when credentials stop working: the
// database's switchboard_revoked notifications (endpoint_revoke, endpoint_rotate,
// expire_credentials and the OAuth revocations of db/code) and an epoch that says whether the
// feed has been continuous. The MCP handler (server/mcpapi) may skip a credential lookup for a
// session the database confirmed within the current epoch; every notification acts on the
// sessions it names. The notifications arrive on the process's one LISTEN connection, which
// the doorbell keeps (server/doorbell): it hands this feed each switchboard_revoked payload and
// every connect and disconnect.
package revocation

import (
	"strings"
	"sync/atomic"
)

// Channel is the pg_notify channel of the feed.
const Channel = "switchboard_revoked"

// Kind is what a notification says about an endpoint.
type Kind int

const (
	// Revoked: the endpoint was revoked; its sessions close. Payload "<endpoint id>".
	Revoked Kind = iota
	// Rotated: its credential was rotated, or a rotation's grace ended; sessions whose
	// credential no longer resolves close, the endpoint stays. Payload "rotated:<endpoint id>".
	Rotated
	// Recheck: OAuth access tokens of the endpoint were revoked; nothing closes, but the
	// endpoint's next requests are checked in the database. Payload "recheck:<endpoint id>".
	Recheck
)

// Event is one notification of the feed.
type Event struct {
	Kind     Kind
	Endpoint string
}

// Parse reads a notification's payload.
func Parse(payload string) Event {
	if id, ok := strings.CutPrefix(payload, "recheck:"); ok {
		return Event{Recheck, id}
	}
	if id, ok := strings.CutPrefix(payload, "rotated:"); ok {
		return Event{Rotated, id}
	}
	return Event{Revoked, payload}
}

// Feed is the process's revocation feed. The zero value has no handler and epoch 0.
type Feed struct {
	on       func(Event)
	connects atomic.Uint64 // LISTEN connections made so far
	epoch    atomic.Uint64 // the current connection's number while it is up, else 0
}

// New makes a feed that calls on for each notification.
func New(on func(Event)) *Feed { return &Feed{on: on} }

// Epoch identifies the LISTEN connection that delivers the feed: nonzero while it is up, and
// different after every reconnect. Whatever was checked against the database while the epoch
// stayed the same has heard of every revocation since; across a change of epoch, notifications
// may have been lost. A nil feed's epoch is 0: it trusts nothing.
func (f *Feed) Epoch() uint64 {
	if f == nil {
		return 0
	}
	return f.epoch.Load()
}

// Connected starts a new epoch: a LISTEN connection came up.
func (f *Feed) Connected() {
	if f != nil {
		f.epoch.Store(f.connects.Add(1))
	}
}

// Disconnected ends the epoch: the LISTEN connection is gone, and notifications with it.
func (f *Feed) Disconnected() {
	if f != nil {
		f.epoch.Store(0)
	}
}

// Deliver hands the feed one payload of Channel (the caller runs it off its LISTEN loop).
func (f *Feed) Deliver(payload string) {
	if f != nil && f.on != nil {
		f.on(Parse(payload))
	}
}
