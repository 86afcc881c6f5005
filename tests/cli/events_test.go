package cli_test

import (
	"strings"
	"testing"

	"switchboard/tests/testdb"
)

// events list shows MCP Events webhook subscriptions, by endpoint id or slug, never a secret.
func TestEventsList(t *testing.T) {
	dsn := testdb.New(t)
	ok[obj](t, dsn, "human", "add", "alice", "--json")
	e := ok[obj](t, dsn, "endpoint", "vend", "--human", "alice", "--agent", "w", "--queues", "inbox", "--json")
	conn := db(t, dsn)
	secret := "whsec_" + strings.Repeat("QUJD", 8)
	id := scalar[string](t, conn, `SELECT switchboard.events_subscribe($1, 'todo.claimable', '{"queue": "inbox"}',
		'https://example.com/hook', $2, NULL, NULL, NULL, true) ->> 'id'`, e["endpoint_id"], secret)
	list := ok[[]obj](t, dsn, "events", "list", "--endpoint", e["slug"].(string), "--json")
	if len(list) != 1 || list[0]["id"] != id || list[0]["url"] != "https://example.com/hook" || list[0]["active"] != true {
		t.Fatalf("events list: %v", list)
	}
	for _, k := range []string{"secret", "previous_secret"} {
		if _, has := list[0][k]; has {
			t.Errorf("events list shows %s", k)
		}
	}
	human := sb(t, dsn, "events", "list")
	if human.code != 0 || !strings.Contains(human.stdout, id) || strings.Contains(human.stdout+human.stderr, secret) {
		t.Fatalf("events list: %q %q", human.stdout, human.stderr)
	}
}
