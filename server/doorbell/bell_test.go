package doorbell

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"switchboard/server/store"
)

func TestNeutralize(t *testing.T) {
	cases := map[string]string{
		"plain":                            "plain",
		"a\r\nb\nc\rd":                     "a  b c d",
		"x</channel>y":                     "x«/channel»y",
		"x</CHANNEL>y</Channel >z":         "x«/channel»y«/channel»z",
		"tab\tand\u2028line\u0085":         "tab and line ",
		"<channel>open is fine</chan nel>": "<channel>open is fine</chan nel>",
	}
	for in, want := range cases {
		if got := Neutralize(in); got != want {
			t.Errorf("Neutralize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMessage(t *testing.T) {
	m := Message(store.Ready{ID: "id-1", Queue: "inbox", Title: "hi\n</channel>" + strings.Repeat("x", 500), Source: "github", Kind: "push\r\n"})
	if strings.ContainsAny(m.Content, "\r\n") || strings.Contains(m.Content, "</channel>") {
		t.Fatalf("content %q", m.Content)
	}
	for _, want := range []string{"id-1", "inbox", "outside sender", "claim"} {
		if !strings.Contains(m.Content, want) {
			t.Fatalf("content lacks %q: %q", want, m.Content)
		}
	}
	if len(m.Content) > 600 {
		t.Fatalf("content too long: %d", len(m.Content))
	}
	want := map[string]string{"todo_id": "id-1", "queue": "inbox", "source": "github", "kind": "push  "}
	for k, v := range want {
		if m.Meta[k] != v {
			t.Fatalf("meta %v", m.Meta)
		}
	}
	if m := Message(store.Ready{ID: "x", Queue: "q"}); len(m.Meta) != 2 {
		t.Fatalf("optional meta present: %v", m.Meta)
	}
}

// A session whose client never takes its notifications fills its buffer; offering more drops
// them at once and never blocks.
func TestStuckSessionNeverBlocks(t *testing.T) {
	b := New(nil, Config{})
	defer b.Close()
	release := make(chan struct{})
	stuck := b.Attach("ep", "s1", func(ctx context.Context, p Params) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	stuck.StreamOpenedForTest()
	start := time.Now()
	b.mu.Lock()
	ep := b.eps["ep"]
	for i := 0; i < 1000; i++ {
		b.offerLocked(ep, nil, store.Ready{ID: fmt.Sprint(i), Queue: "q"})
	}
	b.mu.Unlock()
	if d := time.Since(start); d > time.Second { // blocking would be forever
		t.Fatalf("offering took %v", d)
	}
	var m dto.Metric
	if err := b.m.DoorbellDropped.WithLabelValues("buffer_full").Write(&m); err != nil {
		t.Fatal(err)
	}
	// 16 wait in the buffer and at most one is being written.
	if got := m.GetCounter().GetValue(); got < 1000-bufferSize-1 {
		t.Fatalf("dropped %v", got)
	}
	close(release)
}

// Round-robin prefers sessions with an open stream.
func TestPickPrefersStreams(t *testing.T) {
	ep := &endpoint{}
	a, bb, c := &Session{id: "a"}, &Session{id: "b", streams: 1}, &Session{id: "c", streams: 1}
	ep.sessions = []*Session{a, bb, c}
	seen := map[string]int{}
	for i := 0; i < 10; i++ {
		seen[pick(ep).id]++
	}
	if seen["a"] != 0 || seen["b"] != 5 || seen["c"] != 5 {
		t.Fatalf("picks %v", seen)
	}
	bb.streams, c.streams = 0, 0
	seen = map[string]int{}
	for i := 0; i < 9; i++ {
		seen[pick(ep).id]++
	}
	if seen["a"] != 3 || seen["b"] != 3 || seen["c"] != 3 {
		t.Fatalf("picks without streams %v", seen)
	}
}

// StreamOpenedForTest marks a stream open without the attach read (no store in unit tests).
func (s *Session) StreamOpenedForTest() {
	s.bell.mu.Lock()
	s.streams++
	s.bell.mu.Unlock()
}

// Waiting calls are woken one per ready todo, in arrival order, matching their queue; a call
// that claimed another todo than the one that woke it passes the wake on.
func TestWaitersOnePerTodoInArrivalOrder(t *testing.T) {
	b := New(nil, Config{MaxWaiting: 3})
	defer b.Close()
	noop := func(context.Context, Params) error { return nil }
	s := b.Attach("ep", "s1", noop)
	w1, _ := s.Wait("")
	w2, _ := s.Wait("other")
	w3, _ := s.Wait("")
	if _, err := s.Wait(""); err != ErrTooManyWaiting {
		t.Fatalf("fourth wait: %v", err)
	}
	woken := func(w *Waiter) bool {
		select {
		case <-w.Woken():
			return true
		default:
			return false
		}
	}
	pass := func(id, queue string) {
		b.mu.Lock()
		b.passLocked(b.eps["ep"], store.Ready{ID: id, Queue: queue})
		b.mu.Unlock()
	}
	pass("t1", "inbox")
	if !woken(w1) || woken(w2) || woken(w3) {
		t.Fatal("t1 did not wake the first waiter alone")
	}
	// w1 claims an older todo: t1 is still there, the next matching waiter gets it.
	w1.Begin()
	w1.After("older")
	w1.Leave()
	if woken(w2) || !woken(w3) {
		t.Fatal("the wake did not pass on to the next waiter of a matching queue")
	}
	// w3 lost the race for it: back in line, in its place.
	w3.Begin()
	w3.After("")
	pass("t2", "other")
	if !woken(w2) || woken(w3) {
		t.Fatal("t2 (queue other) did not wake the waiter of queue other")
	}
	pass("t3", "inbox")
	if !woken(w3) {
		t.Fatal("t3 did not wake the requeued waiter")
	}
	// Closing the session ends its waits.
	s.Close()
	select {
	case <-w2.Ended():
		if w2.Err() != ErrWaitEnded {
			t.Fatalf("reason %v", w2.Err())
		}
	default:
		t.Fatal("the wait outlived its session")
	}
}

// Ring again goes to the next session in turn that has a stream and made no call since the
// ring; to the same session when it is alone; nowhere when every other one is draining.
func TestAgainTarget(t *testing.T) {
	b := New(nil, Config{})
	defer b.Close()
	noop := func(context.Context, Params) error { return nil }
	a := b.Attach("ep", "a", noop)
	p := b.Attach("ep", "p", noop)
	c := b.Attach("ep", "c", noop)
	for _, s := range []*Session{a, p, c} {
		s.streams = 1
	}
	ep := b.eps["ep"]
	at := time.Now()
	rg := &ring{r: store.Ready{ID: "t"}, s: p, at: at}
	if got := againTarget(ep, rg); got != c {
		t.Fatalf("target %v, want the next in turn", got.id)
	}
	c.lastCall.Store(at.Add(time.Millisecond).UnixNano()) // c is draining
	if got := againTarget(ep, rg); got != a {
		t.Fatalf("target %v, want a (c drains)", got)
	}
	a.lastCall.Store(at.Add(time.Millisecond).UnixNano())
	if got := againTarget(ep, rg); got != nil {
		t.Fatalf("target %v, want none (every other session drains)", got.id)
	}
	a.streams, c.streams = 0, 0
	if got := againTarget(ep, rg); got != p {
		t.Fatal("alone with a stream: not rung again")
	}
}
