// Package cli_test drives the built `switchboard` binary against a fresh database per test and
// checks the operator CLI of contract §8: the JSON of every command, exit statuses, and that bad
// input writes nothing.
package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// bin is the switchboard binary built once for the package.
var bin string

// baseURL is what the binary is told its public URL is.
const baseURL = "http://sb.test:9999"

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		fmt.Fprintln(os.Stderr, "cli tests: cannot find the module root:", err)
		return 1
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	dir, err := os.MkdirTemp("", "switchboard-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "switchboard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/switchboard")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "cli tests: build failed: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// result of one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// sb runs the binary with DATABASE_URL=dsn (empty: unset).
func sb(t *testing.T, dsn string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env(dsn)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		r.code = exitErr.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

func env(dsn string) []string {
	var e []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DATABASE_URL=") || strings.HasPrefix(kv, "SWITCHBOARD_") {
			continue
		}
		e = append(e, kv)
	}
	e = append(e, "SWITCHBOARD_BASE_URL="+baseURL)
	if dsn != "" {
		e = append(e, "DATABASE_URL="+dsn)
	}
	return e
}

// ok runs a command that must succeed and decodes its stdout: exactly one JSON value.
func ok[T any](t *testing.T, dsn string, args ...string) T {
	t.Helper()
	r := sb(t, dsn, args...)
	if r.code != 0 {
		t.Fatalf("switchboard %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return decodeOne[T](t, r.stdout)
}

func decodeOne[T any](t *testing.T, s string) T {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v T
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, s)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("stdout holds more than one JSON value:\n%s", s)
	}
	return v
}

type obj = map[string]any

// refused runs a command that must be refused as bad input: exit 2, one line on stderr, no stdout.
func refused(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	r := sb(t, dsn, args...)
	if r.code != 2 {
		t.Fatalf("switchboard %s: exit %d (want 2), stdout %q, stderr %q", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("switchboard %s: stdout %q, want nothing", strings.Join(args, " "), r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "switchboard: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("switchboard %s: stderr %q, want one line `switchboard: …`", strings.Join(args, " "), r.stderr)
	}
	return r.stderr
}

// db opens a connection to the test database for setup and checks.
func db(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec1(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func scalar[T any](t *testing.T, conn *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// rowCounts is a fingerprint of everything the CLI can write.
func rowCounts(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	return scalar[string](t, conn, `
		SELECT format('humans=%s operators=%s invites=%s agents=%s endpoints=%s revoked=%s todos=%s open=%s edges=%s approved=%s settings=%s',
		  (SELECT count(*) FROM switchboard.humans),
		  (SELECT count(*) FROM switchboard.humans WHERE operator),
		  (SELECT count(*) FROM switchboard.console_invites),
		  (SELECT count(*) FROM switchboard.agents),
		  (SELECT count(*) FROM switchboard.endpoints),
		  (SELECT count(*) FROM switchboard.endpoints WHERE state = 'revoked'),
		  (SELECT count(*) FROM switchboard.todos),
		  (SELECT count(*) FROM switchboard.todos WHERE state IN ('pending', 'claimed')),
		  (SELECT count(*) FROM switchboard.friend_edges),
		  (SELECT count(*) FROM switchboard.friend_edges WHERE state = 'approved'),
		  (SELECT string_agg(key || ':' || value, ',' ORDER BY key) FROM switchboard.settings))`)
}

// num reads a JSON number as an int.
func num(t *testing.T, v any) int {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v (%T) is not a number", v, v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatalf("%v is not an integer", v)
	}
	return int(i)
}

// strs reads a JSON array of strings.
func strs(t *testing.T, v any) []string {
	t.Helper()
	arr, ok := v.([]any)
	if !ok {
		t.Fatalf("%v (%T) is not an array", v, v)
	}
	out := make([]string, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			t.Fatalf("%v is not a string array", v)
		}
		out[i] = s
	}
	return out
}

func keys(m obj) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
