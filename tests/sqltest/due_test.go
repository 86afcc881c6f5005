package sqltest

import (
	"slices"
	"testing"
	"time"
)

// dueIDs is switchboard.due_todos over the endpoints since p_since.
func (d *DB) dueIDs(eps []string, since time.Time) []string {
	d.t.Helper()
	rows, err := d.Query(ctx(), "SELECT id::text FROM switchboard.due_todos($1::uuid[], $2, 100)", eps, since)
	if err != nil {
		d.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			d.t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func (d *DB) nextDue(eps []string) *time.Time {
	d.t.Helper()
	var at *time.Time
	if err := d.QueryRow(ctx(), "SELECT switchboard.next_due($1::uuid[])", eps).Scan(&at); err != nil {
		d.t.Fatal(err)
	}
	return at
}

func (d *DB) claimable(ids ...string) []string {
	d.t.Helper()
	rows, err := d.Query(ctx(), "SELECT t::text FROM switchboard.claimable_todos($1::uuid[]) t ORDER BY 1", ids)
	if err != nil {
		d.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			d.t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// next_due names the earliest lease expiry or retry window to come; due_todos lists what time
// made claimable, in granted queues and with an attempt left; claimable_todos agrees.
func TestDueTodos(t *testing.T) {
	d := fresh(t)
	ep := d.vend("ann", "a1", "inbox")
	other := d.vend("bob", "b1", "inbox")
	eps := []string{ep}
	since := d.clock().Add(-time.Minute)
	if at := d.nextDue(eps); at != nil {
		t.Fatalf("next_due with nothing in flight: %v", at)
	}
	leased := d.create(ep, "inbox", "leased")
	d.mustCall("SELECT switchboard.claim($1, $2, 60)", ep, leased)
	retried := d.create(ep, "inbox", "retried")
	d.mustClaim(ep, retried)
	d.mustCall("SELECT switchboard.fail($1, $2)", ep, retried) // backoff 30 s
	foreign := d.create(other, "inbox", "another endpoint's")
	d.mustCall("SELECT switchboard.claim($1, $2, 5)", other, foreign)

	retryAt := *d.row(retried).NextRetryAt
	if at := d.nextDue(eps); at == nil || !at.Equal(retryAt) {
		t.Fatalf("next_due %v, want the retry window %v (the other endpoint's 5 s lease is not ours)", at, retryAt)
	}
	// A look-ahead (the doorbell's poll interval) leaves out the moments after it.
	within := func(ahead string) *time.Time {
		var at *time.Time
		if err := d.QueryRow(ctx(), "SELECT switchboard.next_due($1::uuid[], $2::interval)", eps, ahead).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	if at := within("10 seconds"); at != nil {
		t.Fatalf("next_due within 10 s: %v, want none (the retry window is 30 s off, the lease 60 s)", at)
	}
	if at := within("45 seconds"); at == nil || !at.Equal(retryAt) {
		t.Fatalf("next_due within 45 s: %v, want the retry window %v", at, retryAt)
	}
	if got := d.dueIDs(eps, since); len(got) != 0 {
		t.Fatalf("due before any moment passed: %v", got)
	}
	if got := d.claimable(leased, retried); len(got) != 0 {
		t.Fatalf("claimable in flight: %v", got)
	}

	d.expireLease(leased)
	d.dueRetry(retried)
	got := d.dueIDs(eps, since)
	slices.Sort(got)
	want := []string{leased, retried}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("due %v, want %v", got, want)
	}
	if got := d.dueIDs(eps, d.clock()); len(got) != 0 {
		t.Fatalf("due since now: %v", got)
	}
	if got := d.claimable(leased, retried, foreign); !slices.Equal(got, want) {
		t.Fatalf("claimable %v, want %v", got, want)
	}
	if at := d.nextDue(eps); at != nil {
		t.Fatalf("next_due after both passed: %v", at)
	}

	// The last attempt's expired lease is a dead letter, not claimable work.
	d.exec("UPDATE switchboard.todos SET attempt = max_attempts WHERE id = $1", leased)
	if got := d.dueIDs(eps, since); !slices.Equal(got, []string{retried}) {
		t.Fatalf("due %v, want only the retry", got)
	}
	if got := d.claimable(leased); len(got) != 0 {
		t.Fatalf("claimable: %v", got)
	}
	// A revoked endpoint's todos are not claimable.
	d.exec("SELECT switchboard.endpoint_revoke($1)", other)
	pending := d.create(ep, "inbox", "pending")
	if got := d.claimable(pending); !slices.Equal(got, []string{pending}) {
		t.Fatalf("claimable pending: %v", got)
	}
}

// The doorbell's two settings exist with their ranges.
func TestDoorbellSettings(t *testing.T) {
	d := fresh(t)
	for key, want := range map[string]float64{"ring_again_seconds": 15, "claim_wait_max_seconds": 50} {
		var v float64
		if err := d.QueryRow(ctx(), "SELECT switchboard.setting($1)::float8", key).Scan(&v); err != nil || v != want {
			t.Fatalf("%s = %v (%v), want %v", key, v, err, want)
		}
	}
	for _, bad := range []struct {
		key   string
		value float64
	}{{"ring_again_seconds", 0}, {"ring_again_seconds", 3601}, {"ring_again_seconds", 1.5}, {"claim_wait_max_seconds", -1}, {"claim_wait_max_seconds", 601}} {
		_, err := d.Exec(ctx(), "SELECT switchboard.settings_set($1, $2)", bad.key, bad.value)
		wantCode(t, err, invalidArgument, bad.key)
	}
	d.mustCall("SELECT switchboard.settings_set('ring_again_seconds', 3600)")
	d.mustCall("SELECT switchboard.settings_set('claim_wait_max_seconds', 0)")
}
