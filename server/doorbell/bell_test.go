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
