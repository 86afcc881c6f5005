package tool_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"switchboard/server/todotools"
	"switchboard/server/tool"
	"switchboard/tests/testdb"
)

func TestValidateMessages(t *testing.T) {
	var reg tool.Registry
	reg.Add(todotools.Tools()...)
	var claim *tool.Registered
	for _, c := range reg.Tools() {
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
		_, err := claim.Validate(json.RawMessage(in))
		got := ""
		if err != nil {
			got = err.Message
		}
		if got != want {
			t.Errorf("Validate(%s) = %q, want %q", in, got, want)
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
	ours := slices.Sorted(slices.Values(tool.Vocabulary))
	if !slices.Equal(db, ours) {
		t.Fatalf("switchboard.verbs %v\nVocabulary      %v", db, ours)
	}
	var reg tool.Registry
	reg.Add(todotools.Tools()...)
	for _, n := range reg.Names() {
		if !slices.Contains(tool.Vocabulary, n) {
			t.Errorf("tool %s is not a verb", n)
		}
	}
}

// A tool without a title or an Effect (its four hints) is refused at registration.
func TestAddRefusesToolWithoutTitleOrEffect(t *testing.T) {
	run := func(context.Context, *tool.Call, json.RawMessage) (json.RawMessage, error) { return nil, nil }
	for _, tl := range []tool.Tool{
		{Name: "no_title", Effect: tool.ReadOnly, Input: tool.Object(nil), Run: run},
		{Name: "no_effect", Title: "No effect", Input: tool.Object(nil), Run: run},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: registered", tl.Name)
				}
			}()
			var r tool.Registry
			r.Add(tl)
		}()
	}
	var r tool.Registry
	r.Add(tool.Tool{Name: "fine", Title: "Fine", Effect: tool.Settles, Input: tool.Object(nil), Run: run})
	a := r.Published()[0].Annotations
	if a.Title != "Fine" || a.ReadOnlyHint || *a.DestructiveHint || !a.IdempotentHint || *a.OpenWorldHint {
		t.Errorf("annotations %+v", a)
	}
}
