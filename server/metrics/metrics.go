// Package metrics holds the server's Prometheus collectors in one registry, so every part of the
// server (MCP tools, doorbell, reaper, webhook ingest) counts into the same /metrics page.
package metrics

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is the set of collectors. Create it with New; add more with Registry.MustRegister.
type Metrics struct {
	Registry *prometheus.Registry

	// ToolCalls counts MCP tool calls by verb and result code ("ok" or a wire error code).
	ToolCalls *prometheus.CounterVec
	// ToolSeconds is the server-side latency of tool calls by verb.
	ToolSeconds *prometheus.HistogramVec
	// HTTPRequests counts HTTP responses by route family (mcp, health, metrics, webhook, other)
	// and status code.
	HTTPRequests *prometheus.CounterVec
	// Sessions is the number of live MCP sessions in this process.
	Sessions prometheus.Gauge
	// ToolCallsInFlight is the number of tool calls running in this process (waiting ones
	// included). What a request holds lives as long as it runs: with
	// switchboard_http_requests_in_flight (package server), it is the gauge to read beside the
	// heap when memory climbs (docs/operations.md, "Memory").
	ToolCallsInFlight prometheus.Gauge
	// Authentications counts accepted MCP requests by how their credential was checked:
	// database (switchboard.credential_resolve), session (vouched for earlier, see mcpapi) or
	// credential (a 2026-07-28 request whose credential was vouched for earlier).
	Authentications *prometheus.CounterVec

	// Ingest counts webhook deliveries by source and status (for the webhook receiver).
	Ingest *prometheus.CounterVec
	// IngestRefusals counts deliveries refused for their sender's fault, by source type and
	// reason (bad_signature, stale_timestamp, too_large, unparseable).
	IngestRefusals *prometheus.CounterVec
	// IngestRefusalWrites counts the writes of refusal counts to the database (at most one per
	// webhook per second per process, however many deliveries are refused).
	IngestRefusalWrites prometheus.Counter

	// DoorbellSent counts channel notifications written to a session.
	DoorbellSent prometheus.Counter
	// DoorbellDropped counts notifications not delivered, by reason: buffer_full (the
	// session's buffer of 16 was full), write (the session had no stream or was gone).
	DoorbellDropped *prometheus.CounterVec
	// DoorbellReconnects counts (re)connections of the LISTEN connection.
	DoorbellReconnects prometheus.Counter
	// DoorbellRungAgain counts todos rung again because the session first rung made no tool
	// call since (ring_again_seconds).
	DoorbellRungAgain prometheus.Counter
	// DoorbellWaiting is the number of claim_next calls waiting (wait_seconds) in this process.
	DoorbellWaiting prometheus.Gauge

	// Reaped counts what switchboard.reap() did, by kind: requeued, dead_lettered,
	// retries_released.
	Reaped *prometheus.CounterVec
	// ReaperRuns counts reaper runs by result (ok, error).
	ReaperRuns *prometheus.CounterVec
	// Purged counts rows retention deleted, by kind: todos_done (done and cancelled),
	// todos_dead (dead letters), events.
	Purged *prometheus.CounterVec
	// PurgeRuns counts retention runs by result (ok, error).
	PurgeRuns *prometheus.CounterVec
}

// New creates the collectors and registers them (plus Go and process collectors) in a fresh
// registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_tool_calls_total", Help: "MCP tool calls by verb and result code.",
		}, []string{"verb", "code"}),
		ToolSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_tool_call_seconds",
			Help:    "Server-side duration of MCP tool calls by verb.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"verb"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_requests_total", Help: "HTTP responses by route family and status.",
		}, []string{"route", "status"}),
		Sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchboard_mcp_sessions", Help: "Live MCP sessions in this process.",
		}),
		ToolCallsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchboard_tool_calls_in_flight", Help: "MCP tool calls running in this process, waiting claim_next calls included.",
		}),
		Authentications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_mcp_authentications_total",
			Help: "Accepted MCP requests by how the credential was checked: database or session.",
		}, []string{"via"}),
		Ingest: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_ingest_total", Help: "Webhook deliveries by source and status.",
		}, []string{"source", "status"}),
		IngestRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_ingest_refusals_total",
			Help: "Webhook deliveries refused (401, 413, 422) by source type and reason.",
		}, []string{"source", "reason"}),
		IngestRefusalWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_ingest_refusal_writes_total",
			Help: "Writes of per-webhook refusal counts (switchboard.webhook_refused), coalesced to one per webhook per second.",
		}),
		DoorbellSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_doorbell_sent_total", Help: "Channel notifications written to a session.",
		}),
		DoorbellDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_doorbell_dropped_total", Help: "Channel notifications dropped, by reason.",
		}, []string{"reason"}),
		DoorbellReconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_doorbell_listen_connects_total", Help: "Connections (and reconnections) of the LISTEN connection.",
		}),
		DoorbellRungAgain: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_doorbell_rung_again_total", Help: "Todos rung again on another session after ring_again_seconds.",
		}),
		DoorbellWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchboard_claim_waiting", Help: "claim_next calls waiting for a todo (wait_seconds) in this process.",
		}),
		Reaped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_reaped_total", Help: "Todos moved by the reaper, by kind.",
		}, []string{"kind"}),
		ReaperRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_reaper_runs_total", Help: "Reaper runs by result.",
		}, []string{"result"}),
		Purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_purged_total", Help: "Rows deleted by retention (switchboard.purge), by kind.",
		}, []string{"kind"}),
		PurgeRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_purge_runs_total", Help: "Retention runs by result.",
		}, []string{"result"}),
	}
	// Label values known in advance start at zero, so the series exist before the first event.
	for _, r := range []string{"buffer_full", "write"} {
		m.DoorbellDropped.WithLabelValues(r)
	}
	for _, k := range []string{"requeued", "dead_lettered", "retries_released"} {
		m.Reaped.WithLabelValues(k)
	}
	for _, r := range []string{"ok", "error"} {
		m.ReaperRuns.WithLabelValues(r)
		m.PurgeRuns.WithLabelValues(r)
	}
	for _, k := range []string{"todos_done", "todos_dead", "events"} {
		m.Purged.WithLabelValues(k)
	}
	m.Registry.MustRegister(
		// The memstats series, plus the live heap as of the last collection (what the heap
		// returns to after a GC) and the GOGC and GOMEMLIMIT in force.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{
			Matcher: regexp.MustCompile(`^/gc/(heap/live:bytes|gogc:percent|gomemlimit:bytes)$`),
		})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.ToolCalls, m.ToolSeconds, m.HTTPRequests, m.Sessions, m.ToolCallsInFlight, m.Authentications, m.Ingest, m.IngestRefusals, m.IngestRefusalWrites,
		m.DoorbellSent, m.DoorbellDropped, m.DoorbellReconnects, m.DoorbellRungAgain, m.DoorbellWaiting,
		m.Reaped, m.ReaperRuns, m.Purged, m.PurgeRuns,
	)
	return m
}
