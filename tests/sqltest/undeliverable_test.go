package sqltest

import (
	"os"
	"strings"
	"testing"
)

// switchboard.undeliverable holds the Go door's bounds: 64 levels, binary64's range.
func TestUndeliverable(t *testing.T) {
	d := fresh(t)
	for in, want := range map[string]string{
		`{"a":[1,2,{"b":null}]}`:                                              "",
		strings.Repeat("[", 64) + strings.Repeat("]", 64):                     "",
		strings.Repeat("[", 65) + strings.Repeat("]", 65):                     "JSON nested deeper than 64 levels",
		`{"a":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`: "JSON nested deeper than 64 levels",
		`[1e308, -1e308, 5e-324, 0, 9007199254740993]`:                        "",
		`{"n":1e400}`:  "JSON number outside the range of a 64-bit float",
		`[-1e400]`:     "JSON number outside the range of a 64-bit float",
		`{"n":1e-400}`: "JSON number outside the range of a 64-bit float",
	} {
		var got *string
		if err := d.QueryRow(ctx(), `SELECT switchboard.undeliverable($1::jsonb)`, in).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if (got == nil) != (want == "") || got != nil && *got != want {
			t.Errorf("%.40s: got %v, want %q", in, got, want)
		}
	}
}

// An operator push of a payload no strict client could decode is refused; the receiver's
// deliveries (with an event) are checked in Go and not again here.
func TestCreateTodoRefusesUndeliverable(t *testing.T) {
	d := fresh(t)
	ep := d.vend("ann", "a1", "inbox")
	_, err := d.Exec(ctx(), `SELECT switchboard.create_todo($1, 'inbox', 't', $2::jsonb)`, ep, `{"n":1e400}`)
	wantCode(t, err, invalidArgument, "create_todo with 1e400")
	if msg := pgMessage(err); msg != "payload: JSON number outside the range of a 64-bit float" {
		t.Fatalf("message %q", msg)
	}
	_, err = d.Exec(ctx(), `SELECT switchboard.create_todo($1, 'inbox', 't', $2::jsonb)`, ep, strings.Repeat("[", 65)+strings.Repeat("]", 65))
	wantCode(t, err, invalidArgument, "create_todo 65 deep")
}

// Migration 002 dead-letters the undeliverable todos still waiting, without spending an
// attempt; others are untouched. (Run again here on rows written around create_todo, as
// rows from before the bounds were.)
func TestMigrationDeadLettersOldPoison(t *testing.T) {
	d := fresh(t)
	ep := d.vend("ann", "a1", "inbox")
	good := d.create(ep, "inbox", "good")
	poison := map[string]string{}
	for name, payload := range map[string]string{"deep": strings.Repeat("[", 70) + strings.Repeat("]", 70), "huge": `{"n":1e400}`} {
		var id string
		if err := d.QueryRow(ctx(), `INSERT INTO switchboard.todos (endpoint_id, queue, title, payload, max_attempts)
		        VALUES ($1, 'inbox', $2, $3::jsonb, 5) RETURNING id`, ep, name, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		poison[name] = id
	}
	sql, err := os.ReadFile("../../db/migrations/002_undeliverable.sql")
	if err != nil {
		t.Fatal(err)
	}
	d.exec(string(sql))
	for name, id := range poison {
		var state, reason string
		var attempt int
		var retry *string
		if err := d.QueryRow(ctx(), `SELECT state, attempt, next_retry_at::text, result ->> 'error' FROM switchboard.todos WHERE id = $1`, id).
			Scan(&state, &attempt, &retry, &reason); err != nil {
			t.Fatal(err)
		}
		if state != "failed" || attempt != 0 || retry != nil || !strings.HasPrefix(reason, "undeliverable: JSON") {
			t.Errorf("%s: %s attempt %d retry %v %q", name, state, attempt, retry, reason)
		}
	}
	if r := d.row(good); r.State != "pending" {
		t.Fatalf("good todo %s", r.State)
	}
	if got, err := claimNext(d, ep); err != nil || got["todo"] == nil {
		t.Fatalf("claim_next after the sweep: %v %v", got, err)
	}
}
