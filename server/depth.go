package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchboard/server/store"
)

// depthCollector reports queue depth from the view switchboard.queue_depth at scrape time.
type depthCollector struct {
	st     *store.Store
	todos  *prometheus.Desc
	oldest *prometheus.Desc
	failed *prometheus.Desc
}

func newDepthCollector(st *store.Store) *depthCollector {
	return &depthCollector{
		st: st,
		todos: prometheus.NewDesc("switchboard_queue_todos", "Todos by endpoint slug, queue and state.",
			[]string{"endpoint", "queue", "state"}, nil),
		oldest: prometheus.NewDesc("switchboard_queue_oldest_pending_seconds", "Age of the oldest pending todo.",
			[]string{"endpoint", "queue"}, nil),
		failed: prometheus.NewDesc("switchboard_queue_depth_scrape_errors", "1 when reading the queue depth failed.", nil, nil),
	}
}

func (c *depthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.todos
	ch <- c.oldest
	ch <- c.failed
}

func (c *depthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.st.QueueDepths(ctx)
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(c.todos, prometheus.GaugeValue, float64(r.Todos), r.Slug, r.Queue, r.State)
		if r.OldestPending != nil {
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, *r.OldestPending, r.Slug, r.Queue)
		}
	}
	failed := 0.0
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, failed)
}
