package server

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"switchboard/server/console"
	"switchboard/server/mcpapi"
	"switchboard/server/oauth"
)

// Config is the server's configuration. ConfigFromEnv reads it from the environment.
type Config struct {
	// Addr is the listen address (SWITCHBOARD_ADDR, default 127.0.0.1:8080).
	Addr string
	// BaseURL is the public URL (SWITCHBOARD_BASE_URL, default http://<addr>; an unspecified
	// listen host becomes localhost). It is used in URLs handed out (MCP, ingest) and its host
	// passes the DNS-rebinding check.
	BaseURL string
	// DatabaseURL is the PostgreSQL URL (DATABASE_URL); used by Run.
	DatabaseURL string
	// DBMaxConns is the pool size (SWITCHBOARD_DB_MAX_CONNS, default 0: store.PoolConfig's).
	DBMaxConns int32
	// ReaperInterval is how often switchboard.reap() runs (SWITCHBOARD_REAPER_INTERVAL,
	// default 30s, 0 = off). A Go duration, or a number of seconds.
	ReaperInterval time.Duration
	// PurgeInterval is how often retention (switchboard.purge) and the end of credential
	// rotation graces run (SWITCHBOARD_PURGE_INTERVAL, default 1m, 0 = off: pg_cron's job).
	PurgeInterval time.Duration
	// Limits are the per-endpoint token buckets (SWITCHBOARD_TOOL_RATE / _BURST,
	// SWITCHBOARD_WEBHOOK_RATE / _BURST, SWITCHBOARD_INIT_RATE / _BURST for initialize,
	// SWITCHBOARD_EVENTS_RATE / _BURST for events/*; rates as N/s or N/m).
	Limits mcpapi.Limits
	// MaxSessionsPerEndpoint caps the live MCP sessions of one endpoint in this process
	// (SWITCHBOARD_MAX_SESSIONS_PER_ENDPOINT, default 64); past it initialize gets 429.
	MaxSessionsPerEndpoint int
	// DoorbellWindow overrides the trailing re-check delay (0: doorbell_window_ms setting).
	DoorbellWindow time.Duration
	// MaxWaiting caps the claim_next calls of one endpoint waiting here (wait_seconds) at once
	// (SWITCHBOARD_MAX_WAITING_PER_ENDPOINT, default 16); past it a call answers at once.
	MaxWaiting int
	// SessionIdle closes MCP sessions idle this long (SWITCHBOARD_SESSION_IDLE, default 1h).
	SessionIdle time.Duration
	// ShutdownTimeout bounds graceful shutdown (default 15s).
	ShutdownTimeout time.Duration
	// LogLevel is the slog level (SWITCHBOARD_LOG_LEVEL: debug, info, warn, error).
	LogLevel slog.Level
	// BodyBudget bounds the webhook body bytes held at once across all deliveries
	// (SWITCHBOARD_BODY_BUDGET_MB, in MiB, default 64). A delivery that does not fit gets 503
	// with Retry-After.
	BodyBudget int64
	// ReadTimeout bounds reading one request, headers and body (SWITCHBOARD_READ_TIMEOUT,
	// default 60s); WriteTimeout bounds writing its answer (SWITCHBOARD_WRITE_TIMEOUT, default
	// 60s, above the 30 s tool timeout). MCP GET streams are exempt from both.
	ReadTimeout, WriteTimeout time.Duration
	// DebugAddr, when set (SWITCHBOARD_DEBUG_ADDR, e.g. 127.0.0.1:6060), serves Go's
	// net/http/pprof there, on a listener of its own that the public address never routes to:
	// heap and goroutine profiles for an operator chasing memory (docs/operations.md).
	DebugAddr string
	// OAuth configures the authorization server (server/oauth): SWITCHBOARD_OAUTH_ACCESS_TTL
	// (default 1h), SWITCHBOARD_OAUTH_ALLOW_PRIVATE_CLIENTS=1 (client metadata documents on
	// private or loopback addresses), SWITCHBOARD_OAUTH_CA_FILE (PEM CAs trusted besides the
	// system's for those documents), SWITCHBOARD_OAUTH_REGISTRATIONS_PER_MINUTE (default 30).
	OAuth oauth.Options
	// Console configures the human console (server/console): session idle and absolute limits
	// (SWITCHBOARD_CONSOLE_SESSION_IDLE, default 1h; SWITCHBOARD_CONSOLE_SESSION_MAX, 12h) and
	// the failed sign-in allowance. Store, BaseURL and Log are the server's.
	Console console.Options
	// EventsAllowPrivateCallbacks (SWITCHBOARD_EVENTS_ALLOW_PRIVATE_CALLBACKS=1) lets MCP
	// Events webhook callbacks use loopback and private addresses and plain http: for tests
	// and private deployments; off by default (docs/events.md).
	EventsAllowPrivateCallbacks bool
}

// DefaultConfig is the configuration with every default applied.
func DefaultConfig() Config {
	c := Config{
		Addr:           "127.0.0.1:8080",
		ReaperInterval: 30 * time.Second,
		PurgeInterval:  time.Minute,
		Limits:         mcpapi.DefaultLimits(),
		SessionIdle:    time.Hour,
		// A client opens one or two sessions; 64 leaves room for many restarts within the idle
		// timeout while bounding what one credential can hold open.
		MaxSessionsPerEndpoint: 64,
		ShutdownTimeout:        15 * time.Second,
		BodyBudget:             64 << 20,
		ReadTimeout:            time.Minute,
		WriteTimeout:           time.Minute,
	}
	return c
}

// ConfigFromEnv reads the configuration from the environment.
func ConfigFromEnv() (Config, error) {
	c := DefaultConfig()
	if v := os.Getenv("SWITCHBOARD_ADDR"); v != "" {
		c.Addr = v
	}
	c.BaseURL = os.Getenv("SWITCHBOARD_BASE_URL")
	c.DebugAddr = os.Getenv("SWITCHBOARD_DEBUG_ADDR")
	c.DatabaseURL = os.Getenv("DATABASE_URL")
	var errs []string
	bad := func(k string, err error) { errs = append(errs, fmt.Sprintf("%s: %v", k, err)) }
	if v := os.Getenv("SWITCHBOARD_REAPER_INTERVAL"); v != "" {
		d, err := parseInterval(v)
		if err != nil {
			bad("SWITCHBOARD_REAPER_INTERVAL", err)
		}
		c.ReaperInterval = d
	}
	if v := os.Getenv("SWITCHBOARD_PURGE_INTERVAL"); v != "" {
		d, err := parseInterval(v)
		if err != nil {
			bad("SWITCHBOARD_PURGE_INTERVAL", err)
		}
		c.PurgeInterval = d
	}
	if v := os.Getenv("SWITCHBOARD_SESSION_IDLE"); v != "" {
		d, err := parseInterval(v)
		if err != nil || d <= 0 {
			bad("SWITCHBOARD_SESSION_IDLE", fmt.Errorf("want a positive duration"))
		}
		c.SessionIdle = d
	}
	for _, r := range []struct {
		key  string
		into *rate.Limit
	}{{"SWITCHBOARD_TOOL_RATE", &c.Limits.ToolRate}, {"SWITCHBOARD_WEBHOOK_RATE", &c.Limits.WebhookRate},
		{"SWITCHBOARD_INIT_RATE", &c.Limits.InitRate}, {"SWITCHBOARD_EVENTS_RATE", &c.Limits.EventsRate}} {
		if v := os.Getenv(r.key); v != "" {
			l, err := mcpapi.ParseRate(v)
			if err != nil {
				bad(r.key, err)
			} else {
				*r.into = l
			}
		}
	}
	for _, b := range []struct {
		key  string
		into *int
	}{{"SWITCHBOARD_TOOL_BURST", &c.Limits.ToolBurst}, {"SWITCHBOARD_WEBHOOK_BURST", &c.Limits.WebhookBurst},
		{"SWITCHBOARD_INIT_BURST", &c.Limits.InitBurst}, {"SWITCHBOARD_EVENTS_BURST", &c.Limits.EventsBurst}} {
		if v := os.Getenv(b.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				bad(b.key, fmt.Errorf("want a whole number >= 0"))
			} else {
				*b.into = n
			}
		}
	}
	if v := os.Getenv("SWITCHBOARD_MAX_SESSIONS_PER_ENDPOINT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			bad("SWITCHBOARD_MAX_SESSIONS_PER_ENDPOINT", fmt.Errorf("want a whole number >= 1"))
		}
		c.MaxSessionsPerEndpoint = n
	}
	if v := os.Getenv("SWITCHBOARD_MAX_WAITING_PER_ENDPOINT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			bad("SWITCHBOARD_MAX_WAITING_PER_ENDPOINT", fmt.Errorf("want a whole number >= 1"))
		}
		c.MaxWaiting = n
	}
	if v := os.Getenv("SWITCHBOARD_DB_MAX_CONNS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			bad("SWITCHBOARD_DB_MAX_CONNS", fmt.Errorf("want a whole number >= 1"))
		}
		c.DBMaxConns = int32(n)
	}
	if v := os.Getenv("SWITCHBOARD_BODY_BUDGET_MB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 || n > 1<<16 {
			bad("SWITCHBOARD_BODY_BUDGET_MB", fmt.Errorf("want a whole number of MiB, 1..65536"))
		}
		c.BodyBudget = n << 20
	}
	for _, t := range []struct {
		key  string
		into *time.Duration
	}{{"SWITCHBOARD_READ_TIMEOUT", &c.ReadTimeout}, {"SWITCHBOARD_WRITE_TIMEOUT", &c.WriteTimeout}} {
		if v := os.Getenv(t.key); v != "" {
			d, err := parseInterval(v)
			if err != nil || d < time.Second {
				bad(t.key, fmt.Errorf("want a duration of at least 1s"))
			}
			*t.into = d
		}
	}
	if v := os.Getenv("SWITCHBOARD_LOG_LEVEL"); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			bad("SWITCHBOARD_LOG_LEVEL", err)
		}
	}
	if v := os.Getenv("SWITCHBOARD_OAUTH_ACCESS_TTL"); v != "" {
		d, err := parseInterval(v)
		if err == nil && d < time.Second {
			err = fmt.Errorf("want at least 1s")
		}
		if err != nil {
			bad("SWITCHBOARD_OAUTH_ACCESS_TTL", err)
		}
		c.OAuth.AccessTTL = d
	}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{"SWITCHBOARD_CONSOLE_SESSION_IDLE", &c.Console.SessionIdle}, {"SWITCHBOARD_CONSOLE_SESSION_MAX", &c.Console.SessionMax}} {
		if v := os.Getenv(d.env); v != "" {
			t, err := parseInterval(v)
			if err == nil && t < time.Minute {
				err = fmt.Errorf("want at least 1m")
			}
			if err != nil {
				bad(d.env, err)
			}
			*d.to = t
		}
	}
	c.OAuth.AllowPrivateClients = os.Getenv("SWITCHBOARD_OAUTH_ALLOW_PRIVATE_CLIENTS") == "1"
	c.EventsAllowPrivateCallbacks = os.Getenv("SWITCHBOARD_EVENTS_ALLOW_PRIVATE_CALLBACKS") == "1"
	if v := os.Getenv("SWITCHBOARD_OAUTH_CA_FILE"); v != "" {
		pem, err := os.ReadFile(v)
		if err != nil {
			bad("SWITCHBOARD_OAUTH_CA_FILE", err)
		}
		c.OAuth.ExtraCAs = append(c.OAuth.ExtraCAs, pem)
	}
	if v := os.Getenv("SWITCHBOARD_OAUTH_REGISTRATIONS_PER_MINUTE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			bad("SWITCHBOARD_OAUTH_REGISTRATIONS_PER_MINUTE", fmt.Errorf("want a whole number >= 1"))
		}
		c.OAuth.RegistrationsPerMinute = n
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("configuration: %s", strings.Join(errs, "; "))
	}
	return c, nil
}

// parseInterval reads a Go duration ("30s") or a number of seconds ("30", "0").
func parseInterval(v string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 30s, or seconds")
	}
	return d, nil
}

// baseURL is the configured base URL, or one made from the listen address.
func (c Config) baseURL(addr string) string {
	if c.BaseURL != "" {
		return strings.TrimRight(c.BaseURL, "/")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}
