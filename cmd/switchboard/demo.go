package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"switchboard/server/store"
)

const (
	demoHuman = "demo"
	demoAgent = "demo-agent"
	demoQueue = "inbox"
	// demoServerName is the name the MCP client knows the server by (claude mcp add, .mcp.json).
	demoServerName = "switchboard"
)

// demoInfo is everything `switchboard demo` reports: printed by printDemo, or as one JSON object
// with --json. Later additions to the demo (a sample webhook) add a field here and a stanza there.
type demoInfo struct {
	Human      string         `json:"human"`
	Agent      string         `json:"agent"`
	EndpointID string         `json:"endpoint_id"`
	Slug       string         `json:"slug"`
	Queue      string         `json:"queue"`
	MCPURL     string         `json:"mcp_url"`
	Credential string         `json:"credential"`
	MCPConfig  map[string]any `json:"mcp_config"`
	// ClaudeAdd registers the endpoint with Claude Code; ClaudeChannels starts Claude Code with
	// the doorbell shown (channels are a research preview).
	ClaudeAdd      string `json:"claude_mcp_add"`
	ClaudeChannels string `json:"claude_channels"`
	// DatabaseExport, PushCommand and PsqlCommand are operator commands that run as printed
	// from the directory demo ran in: the export first, then the CLI by its real path, and psql.
	DatabaseExport string `json:"database_export"`
	PushCommand    string `json:"push_command"`
	PsqlCommand    string `json:"psql_command"`
	Curl           string `json:"curl"`
	WebhookID      string `json:"webhook_id"`
	IngestURL      string `json:"ingest_url"`
	WebhookCurl    string `json:"webhook_curl"`
	// ConsoleInvite is a one-time sign-in link to the console for the demo human (a new one on
	// every demo run), valid until ConsoleInviteExpires.
	ConsoleInvite        string `json:"console_invite"`
	ConsoleInviteExpires string `json:"console_invite_expires_at"`
	// Reused: an earlier demo's endpoint; Credential is empty (see rotateHint).
	Reused bool `json:"reused"`
}

// switchboard demo: ensure the human `demo`, vend a new endpoint for `demo-agent` (queue inbox,
// every verb, up to 5 github/generic webhooks into inbox) and print how to connect to it.
func runDemo(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	checkAddr := fs.Bool("check-addr", false, "first refuse when SWITCHBOARD_ADDR is taken (make run)")
	if _, err := c.parse(fs, args); err != nil {
		return err
	}
	if *checkAddr {
		if err := checkAddrFree(); err != nil {
			return err
		}
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if *checkAddr {
		servedBaseURL = "" // make run: the server about to start serves SWITCHBOARD_ADDR, not the last one's URL
	}
	info, err := setupDemo(ctx, conn)
	if err != nil {
		return err
	}
	return c.emit(info, func(w io.Writer) { printDemo(w, info) })
}

func setupDemo(ctx context.Context, conn *store.Operator) (demoInfo, error) {
	var pgErr *pgconn.PgError
	if _, err := conn.HumanAdd(ctx, demoHuman); err != nil &&
		!(errors.As(err, &pgErr) && pgErr.Code == "SB409") { // SB409: the human exists already
		return demoInfo{}, err
	}
	if info, ok, err := existingDemo(ctx, conn); ok || err != nil {
		if ok {
			fillDemoCommands(&info)
			err = addConsoleInvite(ctx, conn, &info)
		}
		return info, err
	}
	e, err := vend(ctx, conn, vendRequest{
		human: demoHuman, agent: demoAgent, queues: []string{demoQueue},
		webhookMax: 5, webhookSources: []string{"github", "generic"}, webhookQueues: []string{demoQueue},
	})
	if err != nil {
		return demoInfo{}, err
	}
	info := demoInfo{
		Human:      demoHuman,
		Agent:      demoAgent,
		EndpointID: text(e["endpoint_id"]),
		Slug:       text(e["slug"]),
		Queue:      demoQueue,
		MCPURL:     text(e["mcp_url"]),
		Credential: text(e["credential"]),
	}
	// A generic (token) webhook, so a delivery can be tried with curl alone.
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return demoInfo{}, err
	}
	if info.WebhookID, err = conn.WebhookCreateGeneric(ctx, info.EndpointID, demoQueue, hex.EncodeToString(token)); err != nil {
		return demoInfo{}, err
	}
	info.IngestURL = baseURL() + "/webhooks/w/" + hex.EncodeToString(token)
	fillDemoCommands(&info)
	return info, addConsoleInvite(ctx, conn, &info)
}

// addConsoleInvite mints a one-time console sign-in link for the demo human.
func addConsoleInvite(ctx context.Context, conn *store.Operator, info *demoInfo) error {
	inv, err := newInvite(ctx, conn, demoHuman, 24*time.Hour)
	if err != nil {
		return err
	}
	info.ConsoleInvite, info.ConsoleInviteExpires = text(inv["url"]), text(inv["expires_at"])
	return nil
}

// fillDemoCommands derives the client config and the example commands from the endpoint; a
// reused endpoint (no credential) gets a placeholder where the credential goes.
func fillDemoCommands(info *demoInfo) {
	cred := info.Credential
	if cred == "" {
		cred = "<credential>"
	}
	info.MCPConfig = map[string]any{"mcpServers": map[string]any{demoServerName: map[string]any{
		"type":    "http",
		"url":     info.MCPURL,
		"headers": map[string]any{"Authorization": "Bearer " + cred},
	}}}
	info.ClaudeAdd = fmt.Sprintf(`claude mcp add --transport http %s %s --header "Authorization: Bearer %s"`,
		demoServerName, info.MCPURL, cred)
	info.ClaudeChannels = "claude --dangerously-load-development-channels server:" + demoServerName
	// The URL this process was given, as given (it may carry a password: it is the operator's
	// own, printed to the operator who started the demo, like the credential above).
	info.DatabaseExport = "export DATABASE_URL=" + shellQuote(os.Getenv("DATABASE_URL"))
	info.PushCommand = fmt.Sprintf(
		`%s todo push --endpoint %s --queue %s --title 'Hello from the CLI' --payload '{"hello":"world"}'`,
		selfPath(), info.Slug, info.Queue)
	info.PsqlCommand = `psql "$DATABASE_URL" -c '` + store.RecentTodosSQL + `'`
	info.Curl = fmt.Sprintf(`curl -sS -X POST %s -H 'Authorization: Bearer %s' `+
		`-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' `+
		`-d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"0"}}}'`,
		info.MCPURL, cred)
	if info.IngestURL != "" {
		info.WebhookCurl = fmt.Sprintf(`curl -sS -X POST %s -H 'Content-Type: application/json' `+
			`-H 'X-Delivery-Id: demo-1' -H 'X-Event-Type: hello' -d '{"hello":"webhook"}'`, info.IngestURL)
	}
}

// printDemo is the human-readable form of the demo report. Every command in it runs as printed,
// from the directory demo ran in (the MCP and curl lines once the server runs).
func printDemo(w io.Writer, info demoInfo) {
	cfg, _ := json.MarshalIndent(info.MCPConfig, "", "  ")
	fmt.Fprintf(w, "Switchboard demo: human %q, agent %q, queue %q\n\n", info.Human, info.Agent, info.Queue)
	credLine := info.Credential + "   (shown once: store it now)"
	if info.Reused {
		credLine = rotateHint(info.Slug)
	}
	pairs(w,
		"MCP URL", info.MCPURL,
		"Credential", credLine,
		"Endpoint", info.EndpointID+" ("+info.Slug+")")
	fmt.Fprintf(w, "\nClaude Code: register the endpoint, then check that it connects:\n  %s\n  claude mcp list\n", info.ClaudeAdd)
	fmt.Fprintf(w, "\nOr put this block in the project's .mcp.json (other MCP clients take the same block):\n%s\n", cfg)
	fmt.Fprintf(w, "\nThe doorbell (notifications/claude/channel) shows new work in Claude Code only with channels on,\n"+
		"a research preview that needs a claude.ai login; without them the agent still drains with claim_next:\n  %s\n",
		info.ClaudeChannels)
	fmt.Fprintf(w, "\nIn another shell, from here: push a todo into %s with the CLI, and look at it with psql:\n  %s\n  %s\n  %s\n",
		info.Queue, info.DatabaseExport, info.PushCommand, info.PsqlCommand)
	fmt.Fprintf(w, "\nCheck that the endpoint answers (once the server runs):\n  %s\n", strings.TrimSpace(info.Curl))
	fmt.Fprintf(w, "\nThe console: open this one-time link in a browser to register a passkey for %s and sign in\n"+
		"(until %s; switchboard human invite %s makes another):\n  %s\n", info.Human, info.ConsoleInviteExpires, info.Human, info.ConsoleInvite)
	fmt.Fprintf(w, "\nDeliver to the demo webhook %s (generic: the URL is the credential):\n  %s\n",
		info.WebhookID, info.WebhookCurl)
}

// selfPath is how a shell in the current directory runs this binary: its name when that is
// what PATH finds, else its path relative to here (bin/switchboard in a checkout), else absolute.
func selfPath() string {
	exe, err := os.Executable()
	if err != nil {
		return "switchboard"
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return "switchboard"
	}
	if found, err := exec.LookPath(filepath.Base(exe)); err == nil {
		if found, err = filepath.EvalSymlinks(found); err == nil && found == exe && filepath.IsAbs(found) {
			return filepath.Base(exe)
		}
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, exe); err == nil && filepath.IsLocal(rel) {
			if !strings.Contains(rel, string(filepath.Separator)) {
				rel = "." + string(filepath.Separator) + rel
			}
			return shellQuote(rel)
		}
	}
	return shellQuote(exe)
}

// shellQuote quotes s for a POSIX shell when it holds anything but safe characters.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%,=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// What makes `make run` repeatable: reuse the demo endpoint vended by an earlier run, and stop
// before vending anything when the listen address is taken.

// checkAddrFree refuses when SWITCHBOARD_ADDR (default 127.0.0.1:8080) is taken, so a second
// `make run` stops before it vends anything.
func checkAddrFree() error {
	addr := getenvDefault("SWITCHBOARD_ADDR", "127.0.0.1:8080")
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		host, port, _ := net.SplitHostPort(addr)
		return usagef("port %s is busy (%s is taken, perhaps by a running `make run` or switchboard serve): stop that, or choose another port, e.g. SWITCHBOARD_ADDR=%s make run",
			port, addr, net.JoinHostPort(host, nextPort(port)))
	}
	return usagef("cannot listen on SWITCHBOARD_ADDR=%s: %v", addr, err)
}

func nextPort(port string) string {
	var n int
	if _, err := fmt.Sscanf(port, "%d", &n); err != nil || n <= 0 || n >= 65535 {
		return "8081"
	}
	return fmt.Sprint(n + 1)
}

// existingDemo finds the demo endpoint an earlier demo vended (active, newest) and its demo
// webhook. Its credential is not stored, so it cannot be shown again: Credential stays empty
// and the report says how to rotate it.
func existingDemo(ctx context.Context, conn *store.Operator) (demoInfo, bool, error) {
	d, ok, err := conn.FindDemoEndpoint(ctx, demoHuman, demoAgent, demoQueue)
	if !ok || err != nil {
		return demoInfo{}, false, err
	}
	info := demoInfo{EndpointID: d.ID, Slug: d.Slug, WebhookID: d.WebhookID}
	token := d.IngestToken
	info.Human, info.Agent, info.Queue = demoHuman, demoAgent, demoQueue
	info.MCPURL = mcpURL(info.Slug)
	info.Reused = true
	if token != nil {
		info.IngestURL = baseURL() + "/webhooks/w/" + *token
	}
	return info, true, nil
}

// rotateHint is what the reused demo prints instead of the credential.
func rotateHint(slug string) string {
	return "not shown again (it is stored hashed); print a new one with (DATABASE_URL exported as below): " + selfPath() + " endpoint rotate " + slug
}
