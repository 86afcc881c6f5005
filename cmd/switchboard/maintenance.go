package main

// The maintenance commands, reap and purge: on demand, what the server's maintenance loop
// (server/reaper.go) runs on its own schedule.

import (
	"context"
	"fmt"
	"io"
	"strconv"
)

// switchboard reap → {"requeued", "dead_lettered", "retries_released"}
func runReap(ctx context.Context, c *cli, args []string) error {
	if _, err := c.parse(c.flags(), args); err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	r, err := conn.Reap(ctx)
	if err != nil {
		return err
	}
	out := map[string]any{"requeued": r.Requeued, "dead_lettered": r.DeadLettered, "retries_released": r.RetriesReleased}
	return c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "requeued %d, dead-lettered %d, retries released %d\n", r.Requeued, r.DeadLettered, r.RetriesReleased)
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
