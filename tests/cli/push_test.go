package cli_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchboard/tests/testdb"
)

// sbStdin runs the binary with stdin and returns its stdout (it must succeed).
func sbStdin(t *testing.T, dsn, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env(dsn)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("switchboard %s: %v, stderr %q", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// todo push --file: JSON lines in one statement; a bad line is refused with its number and
// nothing is written.
func TestTodoPushFile(t *testing.T) {
	dsn := testdb.New(t)
	conn := db(t, dsn)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	e := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "inbox", "--json")
	slug := e["slug"].(string)

	file := filepath.Join(t.TempDir(), "todos.jsonl")
	lines := `{"title": "one", "key": "k1"}

{"title": "two", "payload": {"n": [1, 2]}}
{"title": "three", "key": "k1"}
`
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	out := ok[obj](t, dsn, "todo", "push", "--endpoint", slug, "--queue", "inbox", "--file", file, "--json")
	ids := strs(t, out["ids"])
	if num(t, out["created"]) != 2 || len(ids) != 3 || ids[0] != ids[2] || ids[0] == ids[1] || len(out) != 2 {
		t.Fatalf("push --file: %v", out)
	}
	if n := scalar[int](t, conn, `SELECT count(*) FROM switchboard.todos WHERE title IN ('one', 'two') AND source = 'operator'`); n != 2 {
		t.Fatalf("%d todos stored, want 2", n)
	}
	// Claimed in the order of the lines.
	if got := scalar[string](t, conn, `SELECT string_agg(title, ',' ORDER BY created_at, id) FROM switchboard.todos`); got != "one,two" {
		t.Fatalf("claim order %q", got)
	}

	// stdin.
	dec := decodeOne[obj](t, sbStdin(t, dsn, "{\"title\": \"from stdin\"}\n", "todo", "push", "--endpoint", slug, "--queue", "inbox", "--file", "-", "--json"))
	if num(t, dec["created"]) != 1 || len(strs(t, dec["ids"])) != 1 {
		t.Fatalf("push --file -: %v", dec)
	}

	before := rowCounts(t, conn)
	for bad, want := range map[string]string{
		"{\"title\": \"ok\"}\nnot json\n":                       "line 2",
		"{\"title\": \"ok\"}\n\n{\"title\": \"x\", \"q\": 1}\n": "line 3",
		"{\"payload\": 1}\n":                                    "line 1: title is required",
		"{\"title\": \"ok\"}\n{\"title\": 5}\n":                 "line 2",
		"{\"title\": \"a\", \"payload\": " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "}\n": "line 1",
	} {
		if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		msg := refused(t, dsn, "todo", "push", "--endpoint", slug, "--queue", "inbox", "--file", file)
		if !strings.Contains(msg, want) {
			t.Errorf("%q: %q, want %q", bad, msg, want)
		}
	}
	refused(t, dsn, "todo", "push", "--endpoint", slug, "--queue", "inbox", "--file", file, "--title", "x")
	refused(t, dsn, "todo", "push", "--endpoint", slug, "--queue", "elsewhere", "--file", file)
	refused(t, dsn, "todo", "push", "--endpoint", slug, "--queue", "inbox", "--file", filepath.Join(t.TempDir(), "missing"))
	if after := rowCounts(t, conn); after != before {
		t.Fatalf("refusals wrote: %s -> %s", before, after)
	}
}
