package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	demoHuman = "demo"
	demoAgent = "demo-agent"
	demoQueue = "inbox"
)

// demoInfo is everything `switchboard demo` reports: printed by printDemo, or as one JSON object
// with --json. Later additions to the demo (a sample webhook) add a field here and a stanza there.
type demoInfo struct {
	Human       string         `json:"human"`
	Agent       string         `json:"agent"`
	EndpointID  string         `json:"endpoint_id"`
	Slug        string         `json:"slug"`
	Queue       string         `json:"queue"`
	MCPURL      string         `json:"mcp_url"`
	Credential  string         `json:"credential"`
	MCPConfig   map[string]any `json:"mcp_config"`
	PushCommand string         `json:"push_command"`
	Curl        string         `json:"curl"`
	WebhookID   string         `json:"webhook_id"`
	IngestURL   string         `json:"ingest_url"`
	WebhookCurl string         `json:"webhook_curl"`
}

// switchboard demo: ensure the human `demo`, vend a new endpoint for `demo-agent` (queue inbox,
// every verb, up to 5 github/generic webhooks into inbox) and print how to connect to it.
func runDemo(ctx context.Context, c *cli, args []string) error {
	if _, err := c.parse(c.flags(), args); err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	info, err := setupDemo(ctx, conn)
	if err != nil {
		return err
	}
	return c.emit(info, func(w io.Writer) { printDemo(w, info) })
}

func setupDemo(ctx context.Context, conn *pgx.Conn) (demoInfo, error) {
	var pgErr *pgconn.PgError
	if _, err := conn.Exec(ctx, `SELECT switchboard.human_add($1)`, demoHuman); err != nil &&
		!(errors.As(err, &pgErr) && pgErr.Code == "SB409") { // SB409: the human exists already
		return demoInfo{}, err
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
	info.MCPConfig = map[string]any{"mcpServers": map[string]any{"switchboard": map[string]any{
		"type":    "http",
		"url":     info.MCPURL,
		"headers": map[string]any{"Authorization": "Bearer " + info.Credential},
	}}}
	info.PushCommand = fmt.Sprintf(
		`switchboard todo push --endpoint %s --queue %s --title 'Hello from the CLI' --payload '{"hello":"world"}'`,
		info.Slug, info.Queue)
	info.Curl = fmt.Sprintf(`curl -sS -X POST %s -H 'Authorization: Bearer %s' `+
		`-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' `+
		`-d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"0"}}}'`,
		info.MCPURL, info.Credential)
	// A generic (token) webhook, so a delivery can be tried with curl alone.
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return demoInfo{}, err
	}
	if err := conn.QueryRow(ctx, `SELECT switchboard.webhook_create($1, 'generic', $2, $3, NULL) ->> 'webhook_id'`,
		info.EndpointID, demoQueue, hex.EncodeToString(token)).Scan(&info.WebhookID); err != nil {
		return demoInfo{}, err
	}
	info.IngestURL = baseURL() + "/webhooks/w/" + hex.EncodeToString(token)
	info.WebhookCurl = fmt.Sprintf(`curl -sS -X POST %s -H 'Content-Type: application/json' `+
		`-H 'X-Delivery-Id: demo-1' -H 'X-Event-Type: hello' -d '{"hello":"webhook"}'`, info.IngestURL)
	return info, nil
}

// printDemo is the human-readable form of the demo report.
func printDemo(w io.Writer, info demoInfo) {
	cfg, _ := json.MarshalIndent(info.MCPConfig, "", "  ")
	fmt.Fprintf(w, "Switchboard demo: human %q, agent %q, queue %q\n\n", info.Human, info.Agent, info.Queue)
	pairs(w,
		"MCP URL", info.MCPURL,
		"Credential", info.Credential+"   (shown once: store it now)",
		"Endpoint", info.EndpointID+" ("+info.Slug+")")
	fmt.Fprintf(w, "\nMCP client config (paste into your client's MCP settings):\n%s\n", cfg)
	fmt.Fprintf(w, "\nPush a todo into %s with the CLI:\n  %s\n", info.Queue, info.PushCommand)
	fmt.Fprintf(w, "\nCheck that the endpoint answers (once `switchboard serve` runs):\n  %s\n",
		strings.TrimSpace(info.Curl))
	fmt.Fprintf(w, "\nDeliver to the demo webhook %s (generic: the URL is the credential):\n  %s\n",
		info.WebhookID, info.WebhookCurl)
}
