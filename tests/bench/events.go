package main

// MCP Events webhooks (issue 35): one todo fanned out to 1, 100 and 1,000 webhook subscriptions
// on a loopback receiver. Time from the todo's commit to its last callback (p50/p99), outbound
// POSTs per second beside a bare Go HTTP client posting the same number of the same bodies to
// the same receiver handler, and PostgreSQL CPU (the cluster's processes) per event delivered.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"switchboard/tests/e2e/mcpbench"
)

func init() {
	register(Section{Name: "events", Order: 70, Run: eventsSection,
		Doc: "MCP Events webhooks: todo commit -> last callback at 1/100/1000 subscriptions (p50/p99), POSTs/s beside a bare Go client, PostgreSQL CPU per event"})
}

// eventsReceiver counts the POSTs per webhook-id. The bare client's POSTs take the same path
// (read, JSON parse, the lock, the count) under webhook-ids of their own, so both sides pay
// the same receiver cost.
type eventsReceiver struct {
	mu   sync.Mutex
	seen map[string]int
	last map[string]time.Time
	done map[string]chan struct{}
	want int
	body []byte // the last event body received: what the bare client posts
}

func (r *eventsReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var v map[string]any
	_ = json.Unmarshal(body, &v)
	if v["type"] == "verification" {
		_ = json.NewEncoder(w).Encode(map[string]any{"challenge": v["challenge"]})
		return
	}
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	r.seen[id]++
	r.last[id] = time.Now()
	if !strings.HasPrefix(id, "bare_") {
		r.body = body
	}
	if r.seen[id] == r.want {
		if ch := r.done[id]; ch != nil {
			close(ch)
		}
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func eventsSection(ctx context.Context, b *Bench) ([]Row, error) {
	bin, err := b.ServerBin(ctx)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, n := range []int{1, 100, 1000} {
		r, err := eventsFanout(ctx, b, bin, n)
		if err != nil {
			return rows, fmt.Errorf("%d subscriptions: %w", n, err)
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

func eventsFanout(ctx context.Context, b *Bench, bin string, n int) ([]Row, error) {
	dbURL, err := b.NewDB(ctx)
	if err != nil {
		return nil, err
	}
	// 1,000 subscribe calls from one endpoint go faster than its events/* rate allows.
	srv, err := mcpbench.StartProcess(ctx, bin, dbURL, "SWITCHBOARD_EVENTS_ALLOW_PRIVATE_CALLBACKS=1",
		"SWITCHBOARD_EVENTS_RATE=1000000/s", "SWITCHBOARD_EVENTS_BURST=1000000")
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	ep, err := mcpbench.Vend(ctx, dbURL, "bench", srv.URL)
	if err != nil {
		return nil, err
	}
	rc := &eventsReceiver{seen: map[string]int{}, last: map[string]time.Time{}, done: map[string]chan struct{}{}, want: n}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: rc}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()

	// n subscriptions, 8 at a time (each verifies its URL first).
	secret := "whsec_" + strings.Repeat("QUJD", 8)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var subErr error
	var once sync.Once
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := eventsSubscribe(ctx, ep, base+"/hook?i="+strconv.Itoa(i), secret); err != nil {
				once.Do(func() { subErr = err })
			}
		}()
	}
	wg.Wait()
	if subErr != nil {
		return nil, subErr
	}

	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	postmaster, err := postmasterOf(ctx, admin)
	if err != nil {
		return nil, err
	}
	probes := map[int]int{1: 100, 100: 10, 1000: 3}[n]
	var lat []time.Duration
	var rates []float64
	cpu0 := clusterCPU(postmaster)
	for range probes {
		var id string
		t0 := time.Now()
		if err := admin.QueryRow(ctx, `SELECT todo_id FROM switchboard.create_todo($1, 'bench', 'event')`, ep.ID).Scan(&id); err != nil {
			return nil, err
		}
		evID := "todo_" + id + "_0"
		ch := make(chan struct{})
		rc.mu.Lock()
		if rc.seen[evID] >= n {
			close(ch)
		} else {
			rc.done[evID] = ch
		}
		rc.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(60 * time.Second):
			return nil, fmt.Errorf("todo %s: not every callback within 60 s", id)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		rc.mu.Lock()
		d := rc.last[evID].Sub(t0)
		rc.mu.Unlock()
		lat = append(lat, d)
		rates = append(rates, float64(n)/d.Seconds())
		time.Sleep(60 * time.Millisecond) // outside the doorbell's coalescing window
	}
	cpu := clusterCPU(postmaster) - cpu0
	slices.Sort(lat)
	slices.Sort(rates)
	p50, p99 := lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]

	// The bare client: the same number of POSTs of a captured event body, 16 at a time, to the
	// same handler (counted under its own webhook-id).
	rc.mu.Lock()
	body := rc.body
	rc.mu.Unlock()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	var bare []float64
	for k := range probes {
		msgID := "bare_" + strconv.Itoa(k)
		start := time.Now()
		jobs := make(chan struct{}, n)
		for range n {
			jobs <- struct{}{}
		}
		close(jobs)
		var bw sync.WaitGroup
		for range min(16, n) {
			bw.Add(1)
			go func() {
				defer bw.Done()
				for range jobs {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/hook", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("webhook-id", msgID)
					resp, err := hc.Do(req)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}()
		}
		bw.Wait()
		bare = append(bare, float64(n)/time.Since(start).Seconds())
		rc.mu.Lock()
		got := rc.seen[msgID]
		rc.mu.Unlock()
		if got != n {
			return nil, fmt.Errorf("bare client: %d of %d POSTs reached the receiver", got, n)
		}
	}
	slices.Sort(bare)
	rate, bareRate := rates[len(rates)/2], bare[len(bare)/2]
	sec := "events"
	label := fmt.Sprintf("%d sub", n)
	if n > 1 {
		label += "s"
	}
	rowsOut := []Row{
		{Section: sec, Name: "commit -> last callback p50, " + label, Value: ms(p50), Unit: "ms"},
		{Section: sec, Name: "commit -> last callback p99, " + label, Value: ms(p99), Unit: "ms"},
		{Section: sec, Name: "POSTs/s, " + label, Value: rate, Unit: "POST/s", Baseline: bareRate, BaseName: "bare Go client", Ratio: rate / bareRate},
		{Section: sec, Name: "PostgreSQL CPU per event delivered, " + label, Value: float64(cpu.Microseconds()) / float64(probes*n), Unit: "us"},
	}
	if n == 1 {
		pass := p99 < 100*time.Millisecond
		rowsOut[1].Target, rowsOut[1].Pass = "< 100 ms", &pass
	}
	if n == 1000 {
		pass := rate/bareRate >= 0.5
		rowsOut[2].Target, rowsOut[2].Pass = ">= 0.5x bare", &pass
	}
	return rowsOut, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func eventsSubscribe(ctx context.Context, ep mcpbench.Endpoint, url, secret string) error {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "events/subscribe", "params": map[string]any{
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "bench", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": map[string]any{}},
		"name": "todo.claimable", "ttlMs": 3600000,
		"delivery": map[string]any{"mode": "webhook", "url": url, "secret": secret}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+ep.Credential)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "events/subscribe")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if !bytes.Contains(raw, []byte(`"sub_`)) {
		return fmt.Errorf("subscribe: %d %s", resp.StatusCode, raw)
	}
	return nil
}
