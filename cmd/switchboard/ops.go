package main

// Operator commands of day two: credential rotation, dead letters (list, redrive), cancel,
// retention. Each calls one SQL function of the schema switchboard (endpoint_rotate, redrive,
// cancel, purge), so psql and the CLI behave alike.

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"time"

	"switchboard/server/store"
)

// operator names who acts for the redrive and cancel records: operator:<OS user>.
func operator() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return "operator:" + name
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

// switchboard todo dead --endpoint ID|SLUG [--queue Q] [--limit N] → array of dead letters.
func runTodoDead(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	endpoint := fs.String("endpoint", "", "endpoint id or slug")
	queue := fs.String("queue", "", "only this queue")
	limit := fs.Int("limit", 100, "at most this many, newest first (1-10000)")
	if _, err := c.parse(fs, args); err != nil {
		return err
	}
	if err := c.require("endpoint", *endpoint); err != nil {
		return err
	}
	if *limit < 1 || *limit > 10000 {
		return usagef("todo dead: --limit must be between 1 and 10000, got %d", *limit)
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var queueArg *string
	if *queue != "" {
		queueArg = queue
	}
	list, err := asList(conn.DeadLetters(ctx, *endpoint, queueArg, *limit))
	if err != nil {
		return err
	}
	return c.emit(list, func(w io.Writer) {
		rows := make([][]string, 0, len(list))
		for _, d := range list {
			errText := "-"
			if r, ok := d["result"].(map[string]any); ok {
				errText = text(r)
			}
			rows = append(rows, []string{text(d["id"]), text(d["queue"]), text(d["title"]),
				text(d["attempt"]) + "/" + text(d["max_attempts"]), text(d["dead_at"]), text(d["redrives"]), errText})
		}
		table(w, []string{"ID", "QUEUE", "TITLE", "ATTEMPTS", "DEAD_AT", "REDRIVES", "RESULT"}, rows)
		fmt.Fprintf(w, "%d dead letter(s); run again with switchboard todo redrive ID, or --endpoint and --queue for all\n", len(list))
	})
}

// parseSince reads --since: a duration back from now (90m, 2h) or an RFC 3339 time.
func parseSince(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("todo redrive: --since takes a duration back from now (90m, 2h) or an RFC 3339 time (2026-01-02T15:04:05Z), got %q", s)
}

// switchboard todo redrive ID | --endpoint E --queue Q [--since T] → {"redriven", "ids", "by"}
func runTodoRedrive(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	endpoint := fs.String("endpoint", "", "redrive the dead letters of this endpoint (id or slug) …")
	queue := fs.String("queue", "", "… in this queue")
	since := fs.String("since", "", "only those dead-lettered since: a duration back (90m) or an RFC 3339 time")
	var pos []string
	var err error
	byID := len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-'
	if byID {
		pos, err = c.parse(fs, args, "ID")
	} else {
		_, err = c.parse(fs, args)
	}
	if err != nil {
		return err
	}
	r := store.Redrive{By: operator()}
	switch {
	case byID && (*endpoint != "" || *queue != "" || *since != ""):
		return usagef("todo redrive: give a todo ID or --endpoint and --queue, not both")
	case byID:
		if !uuidRE.MatchString(pos[0]) {
			return usagef("todo redrive: todo id must be a UUID, got %q", pos[0])
		}
		r.Todo = &pos[0]
	default:
		if *endpoint == "" && *queue == "" {
			return usagef("todo redrive: give a todo ID, or --endpoint and --queue (usage: switchboard %s)", c.synopsis)
		}
		if err := c.require("endpoint", *endpoint); err != nil {
			return err
		}
		if err := c.require("queue", *queue); err != nil {
			return err
		}
		r.Endpoint, r.Queue = endpoint, queue
		if *since != "" {
			t, err := parseSince(*since)
			if err != nil {
				return err
			}
			r.Since = &t
		}
	}
	out, err := c.object(ctx, func(o *store.Operator) ([]byte, error) { return o.Redrive(ctx, r) })
	if err != nil {
		return err
	}
	return c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "redrove %s dead letter(s) back to pending with a fresh attempt budget (by %s)\n", text(out["redriven"]), text(out["by"]))
		if ids, ok := out["ids"].([]any); ok {
			for _, id := range ids {
				fmt.Fprintf(w, "  %s\n", text(id))
			}
		}
	})
}

// switchboard todo cancel ID → {"id", "state": "cancelled", "by"}
func runTodoCancel(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flags(), args, "ID")
	if err != nil {
		return err
	}
	if !uuidRE.MatchString(pos[0]) {
		return usagef("todo cancel: todo id must be a UUID, got %q", pos[0])
	}
	r, err := c.object(ctx, func(o *store.Operator) ([]byte, error) { return o.Cancel(ctx, pos[0], operator()) })
	if err != nil {
		return err
	}
	return c.emit(r, func(w io.Writer) {
		fmt.Fprintf(w, "cancelled todo %s (never claimable again; purged like a done todo)\n", text(r["id"]))
	})
}

// switchboard purge [--dry-run] → {"todos_done", "todos_dead", "events", "batches", "dry_run"}
func runPurge(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	dry := fs.Bool("dry-run", false, "count what is past retention; delete nothing")
	if _, err := c.parse(fs, args); err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var done, dead, events int64
	batches := 0
	for {
		b, err := conn.Purge(ctx, *dry)
		if err != nil {
			return err
		}
		done, dead, events, batches = done+b.TodosDone, dead+b.TodosDead, events+b.Events, batches+1
		if !b.More {
			break
		}
	}
	out := map[string]any{"todos_done": done, "todos_dead": dead, "events": events, "batches": batches, "dry_run": *dry}
	return c.emit(out, func(w io.Writer) {
		verb := "purged"
		if *dry {
			verb = "would purge"
		}
		fmt.Fprintf(w, "%s %d done/cancelled todo(s), %d dead letter(s), %d event(s)%s\n", verb, done, dead, events,
			map[bool]string{true: "", false: " in " + strconv.Itoa(batches) + " batch(es)"}[*dry])
	})
}
