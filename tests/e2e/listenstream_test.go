package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
)

// rawListen opens a subscriptions/listen stream of a claude/channel client on a connection of
// its own, with no client goroutine behind it, and reads up to the ack.
func rawListen(t *testing.T, endpoint, cred string) (net.Conn, *http.Response, *bufio.Reader) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	caps := map[string]any{"experimental": map[string]any{"claude/channel": map[string]any{}}}
	req := modernRequest(endpoint, cred, "subscriptions/listen", map[string]any{"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
		"params": map[string]any{"_meta": modernMeta(caps), "notifications": map[string]any{}}})
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || fmt.Sprint(resp.TransferEncoding) != "[chunked]" ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("listen stream: %d %v %v", resp.StatusCode, resp.TransferEncoding, resp.Header)
	}
	rd := bufio.NewReader(resp.Body)
	if m := nextEvent(t, rd, 5*time.Second); m["method"] != "notifications/subscriptions/acknowledged" {
		t.Fatalf("first listen message %v", m)
	}
	return conn, resp, rd
}

// goroutinesAtMost waits until this process has at most limit goroutines, for up to 30 s, and
// returns the count it ends on (above limit only when the wait ran out). Opening streams starts
// work that outlives their requests for a while: each stream's doorbell attach read, queued on
// the server's pool, and the pool's new connections (a scram-sha-256 login each, tens of
// milliseconds on a busy machine). A count that has stopped moving for a few samples can still
// hold those, so a count is compared with its bound once they are done; a goroutine a stream
// keeps is still there after 30 s and fails the test.
func goroutinesAtMost(limit int) int {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= limit || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quietGoroutines is the fewest goroutines seen over 200 ms: work that comes and goes only adds.
func quietGoroutines() int {
	n := runtime.NumGoroutine()
	for range 10 {
		time.Sleep(20 * time.Millisecond)
		n = min(n, runtime.NumGoroutine())
	}
	return n
}

// goroutineDump is every goroutine's stack, for a failure message.
func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// An idle claude/channel listen stream is served by net/http and the SDK (issue 34 gave up the
// hijacked streams): per stream, net/http's connection goroutine (parked in the handler) and its
// background read, the SDK session's reader, and the listen's handler parked until the request
// ends: four (a goroutine profile shows 20 of each for 20 streams; 4.00 each once the doorbell's
// attach reads are done). It is
// still rung, and it ends with its connection, giving its goroutines and its place under the
// session cap back.
func TestIdleListenStreams(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("idle", []string{"inbox"}, nil)
	const n = 20
	before := quietGoroutines() // what the test and the server run anyway
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i], _, _ = rawListen(t, e.url(ep), ep.Cred)
	}
	peak := runtime.NumGoroutine()
	idle := goroutinesAtMost(before + n*maxListenGoroutines)
	if idle <= before+n*maxListenGoroutines {
		idle = quietGoroutines()
	}
	per := float64(idle-before) / n
	t.Logf("%d idle listen streams: %d goroutines before, %d with them (%.2f each; %d just after they opened)", n, before, idle, per, peak)
	if per > maxListenGoroutines {
		t.Fatalf("%.2f goroutines per idle listen stream, want at most %d:\n%s", per, maxListenGoroutines, goroutineDump())
	}

	rung := e.vend("rung", []string{"inbox"}, nil)
	_, _, rd := rawListen(t, e.url(rung), rung.Cred)
	id := e.push(rung, "inbox", "over the listen stream")
	m := nextEvent(t, rd, soon)
	params, _ := m["params"].(map[string]any)
	meta, _ := params["meta"].(map[string]any)
	if m["method"] != "notifications/claude/channel" || meta["todo_id"] != id {
		t.Fatalf("listen stream got %v", m)
	}

	for _, c := range conns {
		c.Close()
	}
	// The ringing stream above is still open.
	if left := goroutinesAtMost(before + maxListenGoroutines); left > before+maxListenGoroutines {
		t.Fatalf("%d goroutines after the streams ended, %d before them:\n%s", left, before, goroutineDump())
	}
	// Their places under the cap are free again: 64 more fit.
	for range 64 - 1 {
		rawListen(t, e.url(ep), ep.Cred)
	}
}

// liveHeap is the heap in use just after a collection (two: the first one only moves what
// sync.Pools hold to their victim caches).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// maxListenGoroutines bounds the goroutines of one idle listen stream (TestIdleListenStreams).
const maxListenGoroutines = 5

// The live heap of an idle listen stream stays within the budget issue 34 sets for an idle
// session with its GET stream (64 KiB, docs/benchmarks.md): net/http's connection, request and
// response, the SDK's stateless session and its decoded _meta. Measured as the live heap of
// this process (the server's and the test's end of each connection) per stream, over 200
// streams on 4 endpoints.
func TestListenStreamHeap(t *testing.T) {
	e := newEnv(t)
	eps := make([]endpoint, 4)
	for i := range eps {
		eps[i] = e.vend("heap-"+itoa(i), []string{"inbox"}, nil)
		rawListen(t, e.url(eps[i]), eps[i].Cred) // an endpoint's own state is made on its first request
	}
	const n = 200
	base := quietGoroutines()
	heap := liveHeap()
	for i := range n {
		rawListen(t, e.url(eps[i%len(eps)]), eps[i%len(eps)].Cred)
	}
	goroutinesAtMost(base + n*maxListenGoroutines) // the attach reads and the pool's logins are done
	kib := (float64(liveHeap()) - float64(heap)) / n / 1024
	t.Logf("%d idle listen streams: live heap %.1f KiB each", n, kib)
	if kib > 64 {
		t.Fatalf("%.1f KiB of live heap per idle listen stream, want at most 64", kib)
	}
}
