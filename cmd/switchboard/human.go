package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"time"

	"switchboard/server/console"
	"switchboard/server/store"
)

// switchboard human add NAME [--operator] → {"id", "name", "operator"}
func runHumanAdd(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	operator := fs.Bool("operator", false, "an operator human: sees every human's rows in the console")
	pos, err := c.parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	h, err := c.object(ctx, func(o *store.Operator) ([]byte, error) {
		doc, err := o.HumanAdd(ctx, pos[0])
		if err != nil || !*operator {
			return doc, err
		}
		return o.HumanSetOperator(ctx, pos[0], true)
	})
	if err != nil {
		return err
	}
	if _, ok := h["operator"]; !ok {
		h["operator"] = false
	}
	return c.emit(h, func(w io.Writer) {
		role := ""
		if h["operator"] == true {
			role = ", operator"
		}
		fmt.Fprintf(w, "added human %s (id %s%s)\n", text(h["name"]), text(h["id"]), role)
	})
}

// switchboard human set-operator NAME [--off] → {"id", "name", "operator"}
func runHumanSetOperator(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	off := fs.Bool("off", false, "take the operator mark away")
	pos, err := c.parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	h, err := c.object(ctx, func(o *store.Operator) ([]byte, error) { return o.HumanSetOperator(ctx, pos[0], !*off) })
	if err != nil {
		return err
	}
	return c.emit(h, func(w io.Writer) {
		fmt.Fprintf(w, "human %s: operator %v\n", text(h["name"]), h["operator"])
	})
}

// newInvite mints a console invite for human: the link (shown once; only the token's sha256 is
// stored) and when it expires.
func newInvite(ctx context.Context, conn *store.Operator, human string, ttl time.Duration) (map[string]any, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	inv, err := asObject(conn.ConsoleInviteCreate(ctx, human, store.CredentialHash(token), ttl))
	if err != nil {
		return nil, err
	}
	return map[string]any{"human": human, "url": console.InviteURL(baseURL(), token), "expires_at": inv["expires_at"]}, nil
}

// switchboard human invite NAME [--ttl 24h] → {"human", "url", "expires_at"}
func runHumanInvite(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the link works (1m to 720h)")
	pos, err := c.parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	inv, err := newInvite(ctx, conn, pos[0], *ttl)
	if err != nil {
		return err
	}
	return c.emit(inv, func(w io.Writer) {
		fmt.Fprintf(w, "Sign-in link for %s (works once, until %s; opening it registers a passkey):\n  %s\n",
			text(inv["human"]), text(inv["expires_at"]), text(inv["url"]))
	})
}
