package main

// claim_next that waits: how long from a todo's commit to a waiting claim_next returning it,
// beside the doorbell's own latency (commit to notifications/claude/channel) on the same server.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"switchboard/tests/e2e/agentclient"
	"switchboard/tests/e2e/mcpbench"
)

func init() {
	register(Section{Name: "wait", Order: 37, Run: waitSection,
		Doc: "commit -> waiting claim_next (wait_seconds) returning the todo, p50/p99, beside the doorbell's latency"})
}

const (
	waitProbes = 200
	waitGap    = 60 * time.Millisecond // outside the 40 ms coalescing window, as the doorbell row
)

func waitSection(ctx context.Context, b *Bench) ([]Row, error) {
	dbURL, err := b.NewDB(ctx)
	if err != nil {
		return nil, err
	}
	bin, err := b.ServerBin(ctx)
	if err != nil {
		return nil, err
	}
	srv, err := mcpbench.StartProcess(ctx, bin, dbURL)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()

	ep, err := mcpbench.Vend(ctx, dbURL, "bench", srv.URL)
	if err != nil {
		return nil, err
	}
	wp50, wp99, err := waitLatency(ctx, srv.URL, ep, dbURL, waitProbes, waitGap)
	if err != nil {
		return nil, err
	}
	b.Logf("wait: p50 %v p99 %v", wp50, wp99)
	ep2, err := mcpbench.Vend(ctx, dbURL, "bench", srv.URL)
	if err != nil {
		return nil, err
	}
	dp50, dp99, err := mcpbench.DoorbellLatency(ctx, ep2, dbURL, waitProbes, waitGap)
	if err != nil {
		return nil, err
	}
	b.Logf("wait: doorbell p50 %v p99 %v", dp50, dp99)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	note := fmt.Sprintf("%d todos pushed %v apart, each into one waiting claim_next {wait_seconds: 10}; "+
		"baseline: the doorbell ring on the same server", waitProbes, waitGap)
	return []Row{
		{Section: "wait", Name: "waiting claim_next latency p50 (todo committed -> call returns it)",
			Value: ms(wp50), Unit: "ms", Baseline: ms(dp50), BaseName: "doorbell latency p50",
			Ratio: Ratio(ms(dp50), ms(wp50))},
		{Section: "wait", Name: "waiting claim_next latency p99", Value: ms(wp99), Unit: "ms",
			Baseline: ms(dp99), BaseName: "doorbell latency p99", Ratio: Ratio(ms(dp99), ms(wp99)),
			Target: "< 50 ms", Pass: func() *bool { p := wp99 < 50*time.Millisecond; return &p }(), Note: note},
	}, nil
}

// waitLatency parks one claim_next {wait_seconds: 10} at a time, pushes a todo through SQL once
// the server counts the call as waiting, and measures from just before create_todo to the
// call's answer (the todo, claimed).
func waitLatency(ctx context.Context, base string, ep mcpbench.Endpoint, dbURL string, n int, gap time.Duration) (p50, p99 time.Duration, err error) {
	c, err := agentclient.Connect(ctx, ep.URL, ep.Credential, &agentclient.Options{NoStream: true})
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	type answer struct {
		id  string
		at  time.Time
		err error
	}
	var lat []time.Duration
	for i := 0; i < n; i++ {
		done := make(chan answer, 1)
		go func() {
			var out struct {
				Todo *struct {
					ID string `json:"id"`
				} `json:"todo"`
			}
			err := c.CallInto(ctx, "claim_next", map[string]any{"wait_seconds": 10}, &out)
			a := answer{at: time.Now(), err: err}
			if out.Todo != nil {
				a.id = out.Todo.ID
			}
			done <- a
		}()
		if err := untilWaiting(ctx, base, 1); err != nil {
			return 0, 0, err
		}
		start := time.Now()
		var id string
		if err := conn.QueryRow(ctx, `SELECT todo_id FROM switchboard.create_todo($1, 'bench', 'wait probe')`, ep.ID).Scan(&id); err != nil {
			return 0, 0, err
		}
		a := <-done
		if a.err != nil {
			return 0, 0, a.err
		}
		if a.id != id {
			return 0, 0, fmt.Errorf("waiting call returned %q, want %s", a.id, id)
		}
		lat = append(lat, a.at.Sub(start))
		if _, err := c.Call(ctx, "complete", map[string]any{"id": id}); err != nil {
			return 0, 0, err
		}
		time.Sleep(gap)
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], nil
}

// untilWaiting polls the server's switchboard_claim_waiting gauge until it reads n.
func untilWaiting(ctx context.Context, base string, n int) error {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "switchboard_claim_waiting "); ok {
				if f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64); f == float64(n) {
					return nil
				}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return errors.New("the claim_next call never counted as waiting")
}
