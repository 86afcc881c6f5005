package mcpapi

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"switchboard/server/store"
)

// Limits are the per-endpoint token buckets of contract §4.2.
type Limits struct {
	ToolRate     rate.Limit // every verb but the webhook-management ones
	ToolBurst    int
	WebhookRate  rate.Limit // create_webhook, rotate_webhook, delete_webhook
	WebhookBurst int
	InitRate     rate.Limit // initialize (new sessions)
	InitBurst    int
	EventsRate   rate.Limit // events/* requests (MCP Events: a stream counts once, when opened)
	EventsBurst  int
}

// DefaultLimits: 50/s burst 100 for tools, 10/min burst 5 for webhook management, 2/s burst 64
// for initialize (an endpoint may fill its default session cap at once, then churn sessions at
// 2/s; a client opens one or two, a reconnecting one one every few seconds), 20/s burst 100 for
// events/* (a poll loop per subscription at nextPollMs, at least 1 s; draining hasMore pages
// at once).
func DefaultLimits() Limits {
	return Limits{ToolRate: 50, ToolBurst: 100, WebhookRate: rate.Limit(10.0 / 60), WebhookBurst: 5,
		InitRate: 2, InitBurst: 64, EventsRate: 20, EventsBurst: 100}
}

// ParseRate reads "N/s" or "N/m" (N a non-negative number).
func ParseRate(s string) (rate.Limit, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("rate %q: want N/s or N/m", s)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, fmt.Errorf("rate %q: want N/s or N/m", s)
	}
	switch strings.TrimSpace(unit) {
	case "s":
		return rate.Limit(n), nil
	case "m":
		return rate.Limit(n / 60), nil
	}
	return 0, fmt.Errorf("rate %q: want N/s or N/m", s)
}

// buckets are one endpoint's limiters.
type buckets struct {
	tool, webhook, init, events *rate.Limiter
}

func newBuckets(l Limits) *buckets {
	return &buckets{
		tool:    rate.NewLimiter(l.ToolRate, l.ToolBurst),
		webhook: rate.NewLimiter(l.WebhookRate, l.WebhookBurst),
		init:    rate.NewLimiter(l.InitRate, l.InitBurst),
		events:  rate.NewLimiter(l.EventsRate, l.EventsBurst),
	}
}

// take spends a tool call's token, or says when to retry.
func (b *buckets) take(webhook bool) *store.Error {
	if webhook {
		return spend(b.webhook)
	}
	return spend(b.tool)
}

// spend takes a token from lim, or says when to retry (rate_limited).
func spend(lim *rate.Limiter) *store.Error {
	r := lim.Reserve()
	if !r.OK() {
		return store.Errorf(store.CodeRateLimited, "rate limit exceeded; this verb is not available to the endpoint")
	}
	d := r.Delay()
	if d == 0 {
		return nil
	}
	r.Cancel()
	return store.Errorf(store.CodeRateLimited, "rate limit exceeded; retry in %s", roundUp(d))
}

// roundUp rounds a wait up to whole seconds (or milliseconds below a second).
func roundUp(d time.Duration) time.Duration {
	unit := time.Millisecond
	if d >= time.Second {
		unit = time.Second
	}
	return (d + unit - 1).Truncate(unit)
}
