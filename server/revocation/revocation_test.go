package revocation

import "testing"

func TestParse(t *testing.T) {
	for payload, want := range map[string]Event{
		"0b5c2f0e-2c1d-4c55-9d7e-0c7a6f1e2a3b":         {Revoked, "0b5c2f0e-2c1d-4c55-9d7e-0c7a6f1e2a3b"},
		"rotated:0b5c2f0e-2c1d-4c55-9d7e-0c7a6f1e2a3b": {Rotated, "0b5c2f0e-2c1d-4c55-9d7e-0c7a6f1e2a3b"},
		"recheck:0b5c2f0e-2c1d-4c55-9d7e-0c7a6f1e2a3b": {Recheck, "0b5c2f0e-2c1d-4c55-9d7e-0c7a6f1e2a3b"},
	} {
		if got := Parse(payload); got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", payload, got, want)
		}
	}
}

// An epoch is nonzero only while connected, and a reconnect gives a new one: what was checked
// under the old epoch is not trusted under the new.
func TestEpoch(t *testing.T) {
	var nilFeed *Feed
	if nilFeed.Epoch() != 0 {
		t.Fatal("a nil feed trusts nothing")
	}
	var got []Event
	f := New(func(e Event) { got = append(got, e) })
	if f.Epoch() != 0 {
		t.Fatal("epoch before the first connect")
	}
	f.Connected()
	first := f.Epoch()
	f.Disconnected()
	if first == 0 || f.Epoch() != 0 {
		t.Fatalf("epochs %d then %d", first, f.Epoch())
	}
	f.Connected()
	if f.Epoch() == 0 || f.Epoch() == first {
		t.Fatalf("reconnect kept epoch %d", first)
	}
	f.Deliver("recheck:x")
	if len(got) != 1 || got[0] != (Event{Recheck, "x"}) {
		t.Fatalf("delivered %+v", got)
	}
}
