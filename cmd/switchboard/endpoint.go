package main

// The endpoint commands: vend, list, revoke and rotate a credential; connect, grants and
// revoke-grant for hosted agents that sign in with OAuth (server/oauth).

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"switchboard/server/store"
)

// listFlag is a comma-separated list flag. Empty lists and empty items ("a,,b", "") are refused
// at parse time, before the database is touched.
type listFlag struct {
	set   bool
	items []string
}

func (l *listFlag) String() string { return strings.Join(l.items, ",") }

func (l *listFlag) Set(s string) error {
	items, err := parseList(s)
	if err != nil {
		return err
	}
	l.set, l.items = true, items
	return nil
}

func parseList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty list")
	}
	items := strings.Split(s, ",")
	for i, it := range items {
		items[i] = strings.TrimSpace(it)
		if items[i] == "" {
			return nil, errors.New("empty item in list")
		}
	}
	return items, nil
}

// int32Flag is an integer flag that fits a PostgreSQL int; set tells whether it was given.
type int32Flag struct {
	set   bool
	value int32
}

func (f *int32Flag) String() string { return strconv.Itoa(int(f.value)) }

func (f *int32Flag) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return errors.New("not an integer")
	}
	f.set, f.value = true, int32(v)
	return nil
}

// webhookSourceTypes are the source types a webhook ceiling may allow.
var webhookSourceTypes = []string{"github", "gitea", "stripe", "slack", "cairn", "standard", "generic"}

// impliedVerbs are the granted verbs that were not asked for (e.g. get_todo with list_todos).
func impliedVerbs(asked []string, granted any) []string {
	var out []string
	list, _ := granted.([]any)
	for _, g := range list {
		if v := text(g); !slices.Contains(asked, v) {
			out = append(out, v)
		}
	}
	return out
}

// newCredential mints a bearer credential: sbk_ + base64url (no padding) of 32 random bytes.
func newCredential() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "sbk_" + base64.RawURLEncoding.EncodeToString(b), nil
}

// vendRequest is what endpoint_vend takes, minus the credential.
type vendRequest struct {
	human, agent   string
	queues         []string
	verbs          []string // nil: every verb
	webhookMax     int32
	webhookSources []string
	webhookQueues  []string
	leaseTTL       *int32 // nil: the setting lease_default_seconds
}

// vend mints a credential, hands only its sha256 and display prefix to switchboard.endpoint_vend,
// and returns the endpoint with mcp_url and the credential (the one time it is ever shown).
func vend(ctx context.Context, conn *store.Operator, r vendRequest) (map[string]any, error) {
	cred, err := newCredential()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(cred))
	orEmpty := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	e, err := asObject(conn.EndpointVend(ctx, store.Vend{Human: r.human, Agent: r.agent,
		CredentialHash: sum[:], CredentialPrefix: cred[:12], Queues: r.queues, Verbs: r.verbs,
		WebhookMax: r.webhookMax, WebhookSources: orEmpty(r.webhookSources),
		WebhookQueues: orEmpty(r.webhookQueues), LeaseTTL: r.leaseTTL}))
	if err != nil {
		return nil, err
	}
	e["mcp_url"] = mcpURL(text(e["slug"]))
	e["credential"] = cred
	return e, nil
}

// switchboard endpoint vend … → the endpoint, its MCP URL and its credential.
func runEndpointVend(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	human := fs.String("human", "", "owning human (must exist)")
	agent := fs.String("agent", "", "agent name (created under the human when new)")
	var queues, verbs, sources, whQueues listFlag
	var whMax, leaseTTL int32Flag
	fs.Var(&queues, "queues", "granted queues, comma-separated")
	fs.Var(&verbs, "verbs", "allowed verbs, comma-separated, or all (default all)")
	fs.Var(&whMax, "webhook-max", "webhook ceiling: most webhooks the agent may create (default 0)")
	fs.Var(&sources, "webhook-sources", "webhook ceiling: allowed source types, comma-separated")
	fs.Var(&whQueues, "webhook-queues", "webhook ceiling: allowed target queues, comma-separated")
	fs.Var(&leaseTTL, "lease-ttl", "default lease TTL in seconds for this endpoint (default: setting lease_default_seconds)")
	if _, err := c.parse(fs, args); err != nil {
		return err
	}
	for _, req := range [][2]string{{"human", *human}, {"agent", *agent}} {
		if err := c.require(req[0], req[1]); err != nil {
			return err
		}
	}
	if !queues.set {
		return c.require("queues", "")
	}
	// A ceiling max without sources or queues would let the agent create nothing.
	if whMax.value > 0 && (!sources.set || !whQueues.set) {
		var missing []string
		if !sources.set {
			missing = append(missing, "--webhook-sources (any of "+strings.Join(webhookSourceTypes, ", ")+")")
		}
		if !whQueues.set {
			missing = append(missing, "--webhook-queues (any of --queues: "+strings.Join(queues.items, ",")+")")
		}
		return usagef("--webhook-max %d needs %s: without them the agent could create no webhook", whMax.value, strings.Join(missing, " and "))
	}
	r := vendRequest{
		human: *human, agent: *agent, queues: queues.items,
		webhookMax: whMax.value, webhookSources: sources.items, webhookQueues: whQueues.items,
	}
	switch {
	case !verbs.set, len(verbs.items) == 1 && verbs.items[0] == "all":
		r.verbs = nil
	case slices.Contains(verbs.items, "all"):
		return usagef("--verbs: all cannot be combined with verb names")
	default:
		r.verbs = verbs.items
	}
	if leaseTTL.set {
		r.leaseTTL = &leaseTTL.value
	}

	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	e, err := vend(ctx, conn, r)
	if err != nil {
		return err
	}
	return c.emit(e, func(w io.Writer) {
		fmt.Fprintf(w, "vended endpoint %s for agent %s of human %s\n", text(e["slug"]), text(e["agent"]), text(e["human"]))
		granted := text(e["verbs"])
		if r.verbs == nil {
			granted = "all: " + granted
		} else if implied := impliedVerbs(r.verbs, e["verbs"]); len(implied) > 0 {
			granted += "   (implied: " + strings.Join(implied, ",") + ")"
		}
		ceiling, _ := e["ceiling"].(map[string]any)
		lease := text(e["lease_ttl_seconds"])
		if e["lease_ttl_seconds"] == nil {
			lease = "default (setting lease_default_seconds)"
		}
		pairs(w,
			"endpoint_id", text(e["endpoint_id"]),
			"mcp_url", text(e["mcp_url"]),
			"credential", text(e["credential"])+"   (shown once: store it now)",
			"queues", text(e["queues"]),
			"verbs granted", granted,
			"webhook ceiling", fmt.Sprintf("max %s; sources %s; queues %s",
				text(ceiling["max"]), text(ceiling["allowed_source_types"]), text(ceiling["allowed_queues"])),
			"lease ttl", lease)
	})
}

// switchboard endpoint list [--human NAME] → array of endpoints (never a credential).
func runEndpointList(ctx context.Context, c *cli, args []string) error {
	list, err := c.listForHuman(ctx, args, "only the endpoints of this human", (*store.Operator).EndpointList)
	if err != nil {
		return err
	}
	for _, e := range list {
		delete(e, "credential") // endpoint_json never has it; make sure it never appears here
		delete(e, "credential_hash")
		e["mcp_url"] = mcpURL(text(e["slug"]))
	}
	return c.emit(list, func(w io.Writer) {
		rows := make([][]string, 0, len(list))
		for _, e := range list {
			ceiling, _ := e["ceiling"].(map[string]any)
			verbs, _ := e["verbs"].([]any)
			rows = append(rows, []string{
				text(e["endpoint_id"]), text(e["slug"]), text(e["human"]), text(e["agent"]), text(e["state"]),
				text(e["queues"]), strconv.Itoa(len(verbs)), text(ceiling["max"]), text(e["credential_prefix"]) + "…",
			})
		}
		table(w, []string{"ENDPOINT_ID", "SLUG", "HUMAN", "AGENT", "STATE", "QUEUES", "VERBS", "WEBHOOK_MAX", "CREDENTIAL"}, rows)
	})
}

// switchboard endpoint revoke ID|SLUG → {"endpoint_id", "state": "revoked", "todos_dead_lettered": N}
func runEndpointRevoke(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flags(), args, "ID|SLUG")
	if err != nil {
		return err
	}
	r, err := c.object(ctx, func(o *store.Operator) ([]byte, error) { return o.EndpointRevoke(ctx, pos[0]) })
	if err != nil {
		return err
	}
	return c.emit(r, func(w io.Writer) {
		fmt.Fprintf(w, "revoked endpoint %s; %s open todo(s) dead-lettered\n", text(r["endpoint_id"]), text(r["todos_dead_lettered"]))
	})
}

// switchboard endpoint rotate ID|SLUG [--grace 10m] → the endpoint with its new credential.
func runEndpointRotate(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	grace := fs.Duration("grace", 0, "keep the old credential valid this long (e.g. 10m; at most 168h); default: it stops at once")
	pos, err := c.parse(fs, args, "ID|SLUG")
	if err != nil {
		return err
	}
	if *grace < 0 || *grace > 7*24*time.Hour {
		return usagef("endpoint rotate: --grace must be between 0 and 168h, got %s", *grace)
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	cred, err := newCredential()
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(cred))
	var graceArg *time.Duration // nil: no grace
	if *grace > 0 {
		graceArg = grace
	}
	e, err := asObject(conn.EndpointRotate(ctx, pos[0], sum[:], cred[:12], graceArg))
	if err != nil {
		return err
	}
	e["mcp_url"] = mcpURL(text(e["slug"]))
	e["credential"] = cred
	return c.emit(e, func(w io.Writer) {
		old := "stops now; its live sessions are closed"
		if e["old_credential_until"] != nil {
			old = "valid until " + text(e["old_credential_until"]) + ", then refused and its sessions closed"
		}
		fmt.Fprintf(w, "rotated the credential of endpoint %s (id, slug, scope, todos and webhooks unchanged)\n", text(e["slug"]))
		pairs(w,
			"endpoint_id", text(e["endpoint_id"]),
			"mcp_url", text(e["mcp_url"]),
			"credential", cred+"   (shown once: store it now)",
			"old credential", old)
	})
}

// Approval codes are what a human types into the consent page: 4 groups of 4 from an alphabet
// without look-alikes (about 79 bits), shown once; the database keeps only the sha256.
const approvalAlphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"

func newApprovalCode() (string, error) {
	var b strings.Builder
	for i := range 16 {
		if i > 0 && i%4 == 0 {
			b.WriteByte('-')
		}
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(approvalAlphabet))))
		if err != nil {
			return "", err
		}
		b.WriteByte(approvalAlphabet[n.Int64()])
	}
	return b.String(), nil
}

// switchboard endpoint connect ID|SLUG [--ttl 10m] → {endpoint_id, mcp_url, approval_code,
// expires_at}: what a human pastes into a hosted agent (the MCP URL) and then into the consent
// page (the code).
func runEndpointConnect(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	ttl := fs.Duration("ttl", 10*time.Minute, "how long the approval code works (1m..24h)")
	pos, err := c.parse(fs, args, "ID|SLUG")
	if err != nil {
		return err
	}
	if *ttl < time.Minute || *ttl > 24*time.Hour {
		return usagef("endpoint connect: --ttl must be between 1m and 24h, got %s", *ttl)
	}
	code, err := newApprovalCode()
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(code))
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	r, err := asObject(conn.OAuthApprovalMint(ctx, pos[0], sum[:], *ttl))
	if err != nil {
		return err
	}
	out := map[string]any{"endpoint_id": r["endpoint_id"], "mcp_url": mcpURL(text(r["slug"])),
		"approval_code": code, "expires_at": r["expires_at"]}
	return c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "Paste the MCP URL into the agent host (claude.ai, ChatGPT, ...) as a custom connector;\n"+
			"when its sign-in page opens, enter the approval code there.\n")
		pairs(w,
			"mcp_url", text(out["mcp_url"]),
			"approval_code", code+"   (works once; shown once)",
			"expires_at", text(out["expires_at"]))
	})
}

// switchboard endpoint grants ID|SLUG → the OAuth grants of the endpoint (never a token).
func runEndpointGrants(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flags(), args, "ID|SLUG")
	if err != nil {
		return err
	}
	list, err := c.list(ctx, func(o *store.Operator) ([]byte, error) { return o.OAuthGrantList(ctx, pos[0]) })
	if err != nil {
		return err
	}
	return c.emit(list, func(w io.Writer) {
		rows := make([][]string, 0, len(list))
		for _, g := range list {
			state := "live"
			if g["revoked_at"] != nil {
				state = "revoked " + text(g["revoked_at"])
			}
			rows = append(rows, []string{text(g["grant_id"]), text(g["client_name"]), text(g["redirect_host"]),
				text(g["created_at"]), text(g["live_tokens"]), state})
		}
		table(w, []string{"GRANT_ID", "CLIENT", "REDIRECT_HOST", "CREATED_AT", "LIVE_TOKENS", "STATE"}, rows)
	})
}

// switchboard endpoint revoke-grant GRANT_ID → {grant_id, endpoint_id, state: revoked}
func runEndpointRevokeGrant(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flags(), args, "GRANT_ID")
	if err != nil {
		return err
	}
	if !uuidShape(pos[0]) {
		return usagef("endpoint revoke-grant: %q is not a grant id (a UUID; see switchboard endpoint grants)", pos[0])
	}
	r, err := c.object(ctx, func(o *store.Operator) ([]byte, error) { return o.OAuthGrantRevoke(ctx, pos[0]) })
	if err != nil {
		return err
	}
	return c.emit(r, func(w io.Writer) {
		fmt.Fprintf(w, "revoked grant %s of endpoint %s; its tokens stop now\n", text(r["grant_id"]), text(r["endpoint_id"]))
	})
}

func uuidShape(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if r != '-' {
				return false
			}
		case !strings.ContainsRune("0123456789abcdefABCDEF", r):
			return false
		}
	}
	return true
}
