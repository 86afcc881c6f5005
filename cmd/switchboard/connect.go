package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"math/big"
	"strings"
	"time"

	"switchboard/server/store"
)

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
