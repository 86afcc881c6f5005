package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"switchboard/server/safejson"
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
	var payloadArg, keyArg any // nil: SQL NULL
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
			payloadArg = json.RawMessage(safejson.Sanitize([]byte(*payload)))
		default:
			payloadArg = json.RawMessage(*payload)
		}
	}
	if *key != "" {
		keyArg = *key
	}

	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// A todo outside the endpoint's granted queues could never be listed or claimed: refuse it.
	var endpointID string
	var granted []string
	err = conn.QueryRow(ctx,
		`SELECT e.id::text, e.queues FROM switchboard.endpoints e WHERE e.id = switchboard.endpoint_id($1)`,
		*endpoint).Scan(&endpointID, &granted)
	if err != nil {
		return err
	}
	if !slices.Contains(granted, *queue) {
		return usagef("queue %q is not granted to the endpoint (granted: %s)", *queue, strings.Join(granted, ","))
	}
	var id string
	var created bool
	err = conn.QueryRow(ctx,
		`SELECT todo_id::text, created FROM switchboard.create_todo($1::uuid, $2, $3, $4::jsonb, $5)`,
		endpointID, *queue, *title, payloadArg, keyArg).Scan(&id, &created)
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

// switchboard reap → {"requeued", "dead_lettered", "retries_released"}
func runReap(ctx context.Context, c *cli, args []string) error {
	if _, err := c.parse(c.flags(), args); err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var requeued, dead, released int
	err = conn.QueryRow(ctx, `SELECT requeued, dead_lettered, retries_released FROM switchboard.reap()`).
		Scan(&requeued, &dead, &released)
	if err != nil {
		return err
	}
	out := map[string]any{"requeued": requeued, "dead_lettered": dead, "retries_released": released}
	return c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "requeued %d, dead-lettered %d, retries released %d\n", requeued, dead, released)
	})
}
