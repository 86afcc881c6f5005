package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"

	"switchboard/server/store"
)

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// switchboard friend request --from NAME --to NAME → {"id", "from_human", "to_human", "state": "pending"}
func runFriendRequest(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	from := fs.String("from", "", "human who will deliver work")
	to := fs.String("to", "", "human whose endpoints will receive it")
	if _, err := c.parse(fs, args); err != nil {
		return err
	}
	if err := c.require("from", *from); err != nil {
		return err
	}
	if err := c.require("to", *to); err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	f, err := asObject(conn.FriendRequest(ctx, *from, *to))
	if sqlState(err) == "SB404" { // say which of the two is unknown
		var unknown []string
		for _, h := range [][2]string{{"--from", *from}, {"--to", *to}} {
			if exists, ok := conn.HumanExists(ctx, h[1]); ok && !exists {
				unknown = append(unknown, fmt.Sprintf("%s %q", h[0], h[1]))
			}
		}
		if len(unknown) > 0 {
			return usagef("friend request: unknown human %s (add it with switchboard human add NAME)", strings.Join(unknown, " and "))
		}
	}
	if err != nil {
		return err
	}
	return c.emit(f, func(w io.Writer) {
		fmt.Fprintf(w, "friend edge %s: %s -> %s (%s)\n", text(f["id"]), text(f["from_human"]), text(f["to_human"]), text(f["state"]))
	})
}

// friendDecide makes `friend approve|deny|revoke ID` → {"id", "state"}. SQL allows
// pending → approved|denied and approved → revoked; anything else is a conflict (exit 2).
func friendDecide(state string) func(context.Context, *cli, []string) error {
	return func(ctx context.Context, c *cli, args []string) error {
		pos, err := c.parse(c.flags(), args, "ID")
		if err != nil {
			return err
		}
		if !uuidRE.MatchString(pos[0]) {
			return usagef("friend edge id must be a UUID, got %q", pos[0])
		}
		conn, err := c.connect(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		f, err := asObject(conn.FriendDecide(ctx, pos[0], state))
		if sqlState(err) == "SB409" { // name the edge's state and what the move needs
			if current, ok := conn.FriendState(ctx, pos[0]); ok {
				need := "pending"
				if state == "revoked" {
					need = "approved"
				}
				return usagef("friend %s: the edge %s is %s; only a %s edge can be %s", verbOf(state), pos[0], current, need, state)
			}
		}
		if err != nil {
			return err
		}
		return c.emit(f, func(w io.Writer) {
			fmt.Fprintf(w, "friend edge %s: %s\n", text(f["id"]), text(f["state"]))
		})
	}
}

func verbOf(state string) string {
	return map[string]string{"approved": "approve", "denied": "deny", "revoked": "revoke"}[state]
}

// switchboard friend list [--human NAME] → array of edges.
func runFriendList(ctx context.Context, c *cli, args []string) error {
	list, err := c.listForHuman(ctx, args, "only the edges from or to this human", (*store.Operator).FriendList)
	if err != nil {
		return err
	}
	return c.emit(list, func(w io.Writer) {
		rows := make([][]string, 0, len(list))
		for _, f := range list {
			rows = append(rows, []string{text(f["id"]), text(f["from_human"]), text(f["to_human"]),
				text(f["state"]), text(f["created_at"]), text(f["decided_at"])})
		}
		table(w, []string{"ID", "FROM", "TO", "STATE", "CREATED", "DECIDED"}, rows)
	})
}
