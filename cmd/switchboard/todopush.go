package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"switchboard/server/safejson"
)

// maxPushLine is the longest line todo push --file reads: a payload's largest body (github's
// 25 MiB) and its wrapping.
const maxPushLine = 26 << 20

// pushLine is one line of todo push --file.
type pushLine struct {
	Title   *string         `json:"title"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Key     *string         `json:"key,omitempty"`
}

// runTodoPushFile is todo push --file PATH|-: JSON lines {title, payload?, key?}, pushed in one
// statement (switchboard.push_many) → {"created": N, "ids": [...]}, one id per line. Every line is
// checked before anything is written: a bad one is a usage error naming it, and nothing is
// pushed. Blank lines are skipped.
func runTodoPushFile(ctx context.Context, c *cli, endpoint, queue, path string) error {
	var in io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return usagef("--file: %v", err)
		}
		defer f.Close()
		in = f
	}
	items, err := readPushLines(in)
	if err != nil {
		return err
	}

	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	endpointID, err := grantedQueue(ctx, conn, endpoint, queue)
	if err != nil {
		return err
	}
	out := struct {
		Created int      `json:"created"`
		IDs     []string `json:"ids"`
	}{IDs: []string{}}
	if len(items) > 0 {
		raw, err := conn.PushMany(ctx, endpointID, queue, items)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return err
		}
	}
	return c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "created %d todos in queue %s", out.Created, queue)
		if n := len(out.IDs) - out.Created; n > 0 {
			fmt.Fprintf(w, " (%d lines named a key a live todo holds: nothing created for them)", n)
		}
		fmt.Fprintln(w)
	})
}

// readPushLines reads and checks the JSON lines of todo push --file, returning them as one JSON
// array. A bad line is a usage error (exit 2) with its number.
func readPushLines(in io.Reader) (json.RawMessage, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxPushLine)
	var buf bytes.Buffer
	buf.WriteByte('[')
	n := 0
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		// The bounds every stored payload keeps (server/safejson), one level deeper for the
		// line's object; text jsonb cannot hold becomes U+FFFD, as in a delivery.
		rep, err := safejson.ScanDepth(b, safejson.MaxDepth+1)
		switch {
		case err != nil:
			return nil, usagef("--file line %d: %v", line, err)
		case !rep.JSON:
			return nil, usagef("--file line %d: not valid JSON", line)
		case rep.Unstorable:
			b = safejson.Sanitize(b)
		}
		var l pushLine
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, usagef("--file line %d: want an object {title, payload?, key?}: %v", line, err)
		}
		if l.Title == nil || *l.Title == "" {
			return nil, usagef("--file line %d: title is required", line)
		}
		if l.Key != nil && *l.Key == "" {
			l.Key = nil
		}
		item, err := json.Marshal(l)
		if err != nil {
			return nil, usagef("--file line %d: %v", line, err)
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		buf.Write(item)
		n++
	}
	if err := sc.Err(); err != nil {
		return nil, usagef("--file: %v", err)
	}
	if n == 0 {
		return nil, nil
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}
