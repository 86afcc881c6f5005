package mcpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/time/rate"

	"switchboard/server/store"
	"switchboard/tests/testdb"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]rate.Limit{"50/s": 50, "10/m": rate.Limit(10.0 / 60), " 0.5/s ": 0.5, "0/m": 0} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "50", "50/h", "x/s", "-1/s", "/s"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}

func TestBucketsSayWhenToRetry(t *testing.T) {
	b := newBuckets(Limits{ToolRate: 1, ToolBurst: 1, WebhookRate: rate.Limit(1.0 / 60), WebhookBurst: 1})
	if err := b.take(false); err != nil {
		t.Fatal(err)
	}
	if err := b.take(false); err == nil || err.Code != "rate_limited" || err.Message != "rate limit exceeded; retry in 1s" {
		t.Fatalf("tool: %v", err)
	}
	_ = b.take(true)
	if err := b.take(true); err == nil || err.Message != "rate limit exceeded; retry in 1m0s" {
		t.Fatalf("webhook: %v", err)
	}
	if got := roundUp(1500 * time.Microsecond); got != 2*time.Millisecond {
		t.Fatalf("roundUp %v", got)
	}
}

func TestValidateMessages(t *testing.T) {
	var reg Registry
	reg.Add(TodoTools()...)
	var claim *compiledTool
	for _, c := range reg.tools {
		if c.Name == "claim" {
			claim = c
		}
	}
	cases := map[string]string{
		`[]`:                                "arguments must be a JSON object",
		`"x"`:                               "arguments must be a JSON object",
		`{`:                                 "arguments must be a JSON object",
		`{}`:                                `missing required argument "id"`,
		`{"id":"a","x\nyz":1}`:              `unknown argument "x yz"`,
		`{"id":"a","require_fence":1}`:      `argument "require_fence" has an invalid value`,
		`{"id":"a","lease_ttl_seconds":-1}`: "",
		`null`:                              `missing required argument "id"`,
	}
	for in, want := range cases {
		_, err := claim.validate(json.RawMessage(in))
		got := ""
		if err != nil {
			got = err.Message
		}
		if got != want {
			t.Errorf("validate(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for _, h := range []string{"127.0.0.1:80", "localhost", "[::1]:8080", "::1", "LOCALHOST:1"} {
		if !isLoopback(h) {
			t.Errorf("%s not loopback", h)
		}
	}
	for _, h := range []string{"example.com", "10.0.0.1:80", "localhost.evil.com", ""} {
		if isLoopback(h) {
			t.Errorf("%s loopback", h)
		}
	}
}

// The vocabulary mirrors switchboard.verbs, and every registered tool is in it.
func TestVocabularyMatchesDatabase(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT name FROM switchboard.verbs ORDER BY name`)
	db, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	ours := slices.Sorted(slices.Values(Vocabulary))
	if !slices.Equal(db, ours) {
		t.Fatalf("switchboard.verbs %v\nVocabulary      %v", db, ours)
	}
	var reg Registry
	reg.Add(TodoTools()...)
	for _, n := range reg.Names() {
		if !slices.Contains(Vocabulary, n) {
			t.Errorf("tool %s is not a verb", n)
		}
	}
}

// A credential lookup that raced a revocation (it read "active" just before the revocation
// committed, and returns after the notification was handled) must not open a new session.
func TestRevokedEndpointStaysClosed(t *testing.T) {
	h := New(Options{})
	ep := store.Endpoint{ID: "e1", Slug: "bot-1"}
	e, status := h.acquire(ep)
	if e == nil || status != http.StatusOK {
		t.Fatalf("acquire: %v %d", e, status)
	}
	h.release(e)
	h.Revoke(ep.ID)
	if e, status := h.acquire(ep); e != nil || status != http.StatusUnauthorized {
		t.Fatalf("acquire after revocation: %v %d, want 401", e, status)
	}
}

// A tool without a title or an Effect (its four hints) is refused at registration.
func TestAddRefusesToolWithoutTitleOrEffect(t *testing.T) {
	run := func(context.Context, *Call, json.RawMessage) (json.RawMessage, error) { return nil, nil }
	for _, tool := range []Tool{
		{Name: "no_title", Effect: ReadOnly, Input: Object(nil), Run: run},
		{Name: "no_effect", Title: "No effect", Input: Object(nil), Run: run},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: registered", tool.Name)
				}
			}()
			var r Registry
			r.Add(tool)
		}()
	}
	var r Registry
	r.Add(Tool{Name: "fine", Title: "Fine", Effect: Settles, Input: Object(nil), Run: run})
	a := r.Published()[0].Annotations
	if a.Title != "Fine" || a.ReadOnlyHint || *a.DestructiveHint || !a.IdempotentHint || *a.OpenWorldHint {
		t.Errorf("annotations %+v", a)
	}
}
