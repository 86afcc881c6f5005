package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
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
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
		"params": map[string]any{"_meta": modernMeta(caps), "notifications": map[string]any{}}})
	req, _ := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("MCP-Protocol-Version", modernVersion)
	req.Header.Set("Mcp-Method", "subscriptions/listen")
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
	// Connection: close marks the hijacked stream: the connection ends with it.
	if resp.StatusCode != http.StatusOK || fmt.Sprint(resp.TransferEncoding) != "[chunked]" || !resp.Close ||
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

// An HTTP/1.1 listen stream is taken out of net/http once its ack is written, as a GET stream
// is (TestGETStreamOutsideNetHTTP): an idle claude/channel listen keeps one goroutine (the
// connection's reader; the target is two, a listen with resource subscriptions also parks the
// SDK's listen handler), it is still rung, and it ends with its connection, giving its
// goroutines and its place under the session cap back.
func TestListenStreamOutsideNetHTTP(t *testing.T) {
	e := newEnv(t)
	ep := e.vend("idle", []string{"inbox"}, nil)
	const n = 20
	before := quietGoroutines() // what the test and the server run anyway
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i], _, _ = rawListen(t, e.url(ep), ep.Cred)
	}
	peak := runtime.NumGoroutine()
	idle := goroutinesAtMost(before + n*3/2) // one each, the connection's reader; two fails
	if idle <= before+n*3/2 {
		idle = quietGoroutines()
	}
	per := float64(idle-before) / n
	t.Logf("%d idle listen streams: %d goroutines before, %d with them (%.2f each; %d just after they opened)", n, before, idle, per, peak)
	if per > 1.5 {
		t.Fatalf("%.2f goroutines per idle listen stream, want 1:\n%s", per, goroutineDump())
	}

	rung := e.vend("rung", []string{"inbox"}, nil)
	_, _, rd := rawListen(t, e.url(rung), rung.Cred)
	id := e.push(rung, "inbox", "over the hijacked listen stream")
	m := nextEvent(t, rd, soon)
	params, _ := m["params"].(map[string]any)
	meta, _ := params["meta"].(map[string]any)
	if m["method"] != "notifications/claude/channel" || meta["todo_id"] != id {
		t.Fatalf("listen stream got %v", m)
	}

	for _, c := range conns {
		c.Close()
	}
	// The ringing stream above is still open: its reader, and the ring's work winding down.
	if left := goroutinesAtMost(before + 4); left > before+4 {
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

// An idle hijacked listen stream keeps none of net/http's state for its request (not the
// connection's 4 KiB read and write buffers, not the request or the response), and its
// session keeps the client's capabilities as encoding/json decodes them, not as the SDK's
// decoder does (a map sized for 64 entries per JSON object). Measured as the live heap of
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
	goroutinesAtMost(base + n) // the attach reads and the pool's logins are done
	kib := (float64(liveHeap()) - float64(heap)) / n / 1024
	t.Logf("%d idle listen streams: live heap %.1f KiB each", n, kib)
	// 8.0-9.3 KiB each in four runs; 13.3-15.1 with the SDK's capabilities, 23.0-25.3 with
	// net/http's response kept as well.
	if kib > 12 {
		t.Fatalf("%.1f KiB of live heap per idle listen stream, want at most 12", kib)
	}
}
