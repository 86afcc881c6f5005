package main

// The todo commands: push operator-authored work; list, redrive and cancel dead letters. Each
// calls one SQL function of the schema switchboard (create_todo, redrive, cancel), so psql and
// the CLI behave alike.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"switchboard/server/safejson"
	"switchboard/server/store"
)

// switchboard todo push --endpoint ID|SLUG --queue Q --title T [--payload JSON] [--key K] → {"id", "created"}
// (with --file PATH|- instead of --title: many, see todopush.go)
//
// Operator-authored work goes through switchboard.create_todo, the path webhook deliveries take:
// the same idempotency (a live todo with the same key wins, created=false) and doorbell.
func runTodoPush(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	endpoint := fs.String("endpoint", "", "endpoint id or slug")
	queue := fs.String("queue", "", "queue (one of the endpoint's granted queues)")
	title := fs.String("title", "", "title")
	payload := fs.String("payload", "", "payload, a JSON value")
	key := fs.String("key", "", "idempotency key")
	file := fs.String("file", "", "push JSON lines {title, payload?, key?} from this file (- for stdin), in one statement")
	if _, err := c.parse(fs, args); err != nil {
		return err
	}
	if *file != "" {
		if *title != "" || *payload != "" || *key != "" {
			return usagef("--file takes the titles, payloads and keys from its lines: not with --title, --payload or --key")
		}
		for _, req := range [][2]string{{"endpoint", *endpoint}, {"queue", *queue}} {
			if err := c.require(req[0], req[1]); err != nil {
				return err
			}
		}
		return runTodoPushFile(ctx, c, *endpoint, *queue, *file) // todopush.go
	}
	for _, req := range [][2]string{{"endpoint", *endpoint}, {"queue", *queue}, {"title", *title}} {
		if err := c.require(req[0], req[1]); err != nil {
			return err
		}
	}
	var payloadArg, keyArg *string // nil: SQL NULL
	if *payload != "" {
		// The bounds every stored payload keeps (server/safejson): a strict client must be able
		// to decode the todo; text jsonb cannot hold becomes U+FFFD, as in a delivery.
		rep, err := safejson.Scan([]byte(*payload))
		switch {
		case err != nil:
			return usagef("--payload: %v", err)
		case !rep.JSON:
			if err := checkJSON(*payload); err != nil {
				return err // names the byte where it goes wrong
			}
			return usagef("--payload is not valid JSON")
		case rep.Unstorable:
			sanitized := string(safejson.Sanitize([]byte(*payload)))
			payloadArg = &sanitized
		default:
			payloadArg = payload
		}
	}
	if *key != "" {
		keyArg = key
	}

	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	endpointID, err := grantedQueue(ctx, conn, *endpoint, *queue)
	if err != nil {
		return err
	}
	id, created, err := conn.CreateTodo(ctx, endpointID, *queue, *title, payloadArg, keyArg)
	if err != nil {
		return err
	}
	return c.emit(map[string]any{"id": id, "created": created}, func(w io.Writer) {
		if created {
			fmt.Fprintf(w, "created todo %s in queue %s\n", id, *queue)
		} else {
			fmt.Fprintf(w, "todo %s already exists with key %q (nothing created)\n", id, *key)
		}
	})
}

// checkJSON refuses a --payload that is not one JSON value, naming where it goes wrong.
func checkJSON(s string) error {
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	err := dec.Decode(&v)
	if err == nil {
		end := dec.InputOffset()
		if _, extra := dec.Token(); extra == nil {
			return usagef("--payload is not valid JSON: another value follows the first one, which ends at byte %d", end)
		}
		return nil
	}
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return usagef("--payload is not valid JSON: %s at byte %d (near %q)", syn.Error(), syn.Offset, around(s, int(syn.Offset)))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return usagef("--payload is not valid JSON: it ends early, at byte %d", len(s))
	default:
		return usagef("--payload is not valid JSON: %v", err)
	}
}

// around is the text of s near byte offset off, for an error message.
func around(s string, off int) string {
	lo, hi := max(0, off-10), min(len(s), off+10)
	return s[lo:hi]
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

// grantedQueue is the id of the endpoint (an id or slug) when queue is one of its granted
// queues: a todo outside them could never be listed or claimed, so push refuses it.
func grantedQueue(ctx context.Context, conn *store.Operator, endpoint, queue string) (string, error) {
	endpointID, granted, err := conn.EndpointQueues(ctx, endpoint)
	if err != nil {
		return "", err
	}
	if !slices.Contains(granted, queue) {
		return "", usagef("queue %q is not granted to the endpoint (granted: %s)", queue, strings.Join(granted, ","))
	}
	return endpointID, nil
}
