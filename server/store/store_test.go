package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"switchboard/server/store"
	"switchboard/tests/testdb"
)

// open returns a store as the server runs it (switchboard_runtime) and an admin pool for fixtures.
func open(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.New(t)
	pool, err := store.Open(ctx, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	admin, err := store.OpenAdmin(ctx, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return store.New(pool), admin
}

// vend makes a human and an endpoint with the given queues and verbs (nil: all).
func vend(t *testing.T, pool *pgxpool.Pool, human, cred string, queues []string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO switchboard.humans (name) VALUES ($1) ON CONFLICT DO NOTHING`, human); err != nil {
		t.Fatal(err)
	}
	var ep struct {
		ID string `json:"endpoint_id"`
	}
	var raw []byte
	err := pool.QueryRow(ctx, `SELECT switchboard.endpoint_vend($1, 'agent', $2, 'sbk_x', $3)`,
		human, store.CredentialHash(cred), queues).Scan(&raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ep); err != nil {
		t.Fatal(err)
	}
	return ep.ID
}

func push(t *testing.T, pool *pgxpool.Pool, ep, queue, title string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(), `SELECT todo_id FROM switchboard.create_todo($1, $2, $3)`, ep, queue, title).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestErrorCodesMatchDatabase(t *testing.T) {
	_, pool := open(t)
	rows, err := pool.Query(context.Background(), `SELECT sqlstate, code FROM switchboard.error_codes`)
	if err != nil {
		t.Fatal(err)
	}
	db := map[string]string{}
	for rows.Next() {
		var s, c string
		if err := rows.Scan(&s, &c); err != nil {
			t.Fatal(err)
		}
		db[s] = c
	}
	goMap := store.SQLStates()
	if len(db) != len(goMap) {
		t.Fatalf("database has %d codes, Go %d", len(db), len(goMap))
	}
	for s, c := range db {
		if goMap[s] != c {
			t.Errorf("%s: database %q, Go %q", s, c, goMap[s])
		}
	}
}

func code(err error) string {
	if err == nil {
		return "ok"
	}
	return store.Classify(err).Code
}

func TestResolveAndVerbs(t *testing.T) {
	st, pool := open(t)
	ctx := context.Background()
	ep := vend(t, pool, "ann", "sbk_one", []string{"a", "b"})
	got, ok, err := st.ResolveCredential(ctx, store.CredentialHash("sbk_one"))
	if err != nil || !ok || got.ID != ep || len(got.Queues) != 2 || len(got.Verbs) == 0 {
		t.Fatalf("resolve: %+v %v %v", got, ok, err)
	}
	if _, ok, err := st.ResolveCredential(ctx, store.CredentialHash("sbk_nope")); ok || err != nil {
		t.Fatalf("unknown credential resolved: %v %v", ok, err)
	}

	id := push(t, pool, ep, "a", "first")
	if _, err := st.GetTodo(ctx, ep, "not-a-uuid"); code(err) != store.CodeNotFound {
		t.Fatalf("malformed id: %v", err)
	}
	if _, err := st.GetTodo(ctx, ep, "00000000-0000-0000-0000-000000000000"); code(err) != store.CodeNotFound {
		t.Fatalf("unknown id: %v", err)
	}
	q := "zzz"
	if _, err := st.ListTodos(ctx, ep, &q, nil, nil); code(err) != store.CodeForbidden {
		t.Fatalf("foreign queue: %v", err)
	}
	raw, err := st.ClaimNext(ctx, ep, store.NextOptions{RequireFence: true})
	if err != nil {
		t.Fatal(err)
	}
	var claimed struct {
		Empty bool   `json:"empty"`
		Token string `json:"lease_token"`
		Todo  struct {
			ID string `json:"id"`
		} `json:"todo"`
	}
	if err := json.Unmarshal(raw, &claimed); err != nil || claimed.Empty || claimed.Todo.ID != id || claimed.Token == "" {
		t.Fatalf("claim_next: %s %v", raw, err)
	}
	if _, err := st.Heartbeat(ctx, ep, id, nil, nil); code(err) != store.CodeConflict {
		t.Fatalf("heartbeat without fence: %v", err)
	}
	if _, err := st.Heartbeat(ctx, ep, id, nil, &claimed.Token); err != nil {
		t.Fatalf("heartbeat with fence: %v", err)
	}
}

func TestFinishWithNext(t *testing.T) {
	st, pool := open(t)
	ctx := context.Background()
	ep := vend(t, pool, "bob", "sbk_two", []string{"a"})
	first := push(t, pool, ep, "a", "one")
	second := push(t, pool, ep, "a", "two")
	if _, err := st.Claim(ctx, ep, first, nil, false); err != nil {
		t.Fatal(err)
	}

	// A refused transition claims nothing.
	tok := "wrong"
	if _, err := st.Finish(ctx, store.Complete, ep, first, nil, &tok, &store.NextOptions{}); code(err) != store.CodeConflict {
		t.Fatalf("complete with a bad fence: %v", err)
	}
	var state string
	_ = pool.QueryRow(ctx, `SELECT state FROM switchboard.todos WHERE id = $1`, second).Scan(&state)
	if state != "pending" {
		t.Fatalf("second todo %s after a refused complete", state)
	}

	type finished struct {
		State string
		Next  struct {
			Empty bool
			Todo  struct{ ID string }
			Error string
		}
	}
	raw, err := st.Finish(ctx, store.Complete, ep, first, json.RawMessage(`{"ok":1}`), nil, &store.NextOptions{})
	var done finished
	if err != nil || json.Unmarshal(raw, &done) != nil {
		t.Fatalf("complete+next: %s %v", raw, err)
	}
	if done.State != "done" || done.Next.Empty || done.Next.Todo.ID != second || done.Next.Error != "" {
		t.Fatalf("complete+next: %s", raw)
	}

	// The claim fails (queue outside the grant): the transition still stands.
	bad := "elsewhere"
	raw, err = st.Finish(ctx, store.Release, ep, second, nil, nil, &store.NextOptions{Queue: &bad})
	var released finished
	if err != nil || json.Unmarshal(raw, &released) != nil {
		t.Fatalf("release+bad next: %s %v", raw, err)
	}
	if released.State != "pending" || released.Next.Error != "forbidden: queue is outside the granted queues" {
		t.Fatalf("release+bad next: %s", raw)
	}
	_ = pool.QueryRow(ctx, `SELECT state FROM switchboard.todos WHERE id = $1`, second).Scan(&state)
	if state != "pending" {
		t.Fatalf("released todo is %s", state)
	}
	// The pool still works (the connection was left clean).
	if _, err := st.ClaimNext(ctx, ep, store.NextOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestDoorbellReadsAndReap(t *testing.T) {
	st, pool := open(t)
	ctx := context.Background()
	ep := vend(t, pool, "cy", "sbk_three", []string{"a"})
	id := push(t, pool, ep, "a", "hello")
	rs, now, err := st.ReadySince(ctx, time.Time{}, 10)
	if err != nil || len(rs) != 1 || rs[0].ID != id || rs[0].Endpoint != ep || rs[0].Title != "hello" ||
		rs[0].Source != "operator" || now.Before(rs[0].ReadyAt) {
		t.Fatalf("ready: %+v %v %v", rs, now, err)
	}
	t0 := rs[0].ReadyAt
	rs, now2, err := st.ReadySince(ctx, t0.Add(time.Millisecond), 10)
	if err != nil || len(rs) != 0 || now2.Before(now) {
		t.Fatalf("ready after: %+v %v %v", rs, now2, err)
	}
	other := vend(t, pool, "dee", "sbk_four", []string{"a"})
	push(t, pool, other, "a", "x1")
	push(t, pool, other, "a", "x2")
	rs, _, err = st.ReadySince(ctx, t0, 2)
	if err != nil || len(rs) != 2 || rs[1].Endpoint != other || rs[1].Title != "x1" {
		t.Fatalf("ready across endpoints, limit 2: %+v %v", rs, err)
	}
	rs, err = st.OldestPending(ctx, ep, 3)
	if err != nil || len(rs) != 1 {
		t.Fatalf("oldest: %+v %v", rs, err)
	}
	if w, err := st.DoorbellWindow(ctx); err != nil || w <= 0 {
		t.Fatalf("window: %v %v", w, err)
	}
	if _, err := st.Reap(ctx); err != nil {
		t.Fatal(err)
	}
}

// The server's pool runs as switchboard_runtime whatever the login: it cannot read a table
// directly, only call the functions. An admin pool (fixtures) runs as the login.
func TestOpenRunsAsRuntimeRole(t *testing.T) {
	st, admin := open(t)
	ctx := context.Background()
	var user string
	if err := st.Pool().QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil || user != store.RuntimeRole {
		t.Fatalf("store pool runs as %q (%v), want %s", user, err, store.RuntimeRole)
	}
	_, err := st.Pool().Exec(ctx, `SELECT signing_secret FROM switchboard.webhooks`)
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "42501" {
		t.Fatalf("runtime read switchboard.webhooks: %v, want SQLSTATE 42501", err)
	}
	if err := admin.QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil || user == store.RuntimeRole {
		t.Fatalf("admin pool runs as %q (%v)", user, err)
	}
}

// Two batches that finish the same todos in opposite orders, at once: each todo is finished by
// exactly one of them, the other answers conflict for it, and neither fails (should their plans
// lock the rows in different orders, the deadlock is run again: FinishMany).
func TestFinishManyRacing(t *testing.T) {
	st, pool := open(t)
	ctx := context.Background()
	ep := vend(t, pool, "carol", "sbk_race", []string{"a"})
	max := 10
	for round := range 10 {
		for i := range max {
			push(t, pool, ep, "a", fmt.Sprint("round ", round, " todo ", i))
		}
		raw, err := st.ClaimNext(ctx, ep, store.NextOptions{Max: &max})
		if err != nil {
			t.Fatal(err)
		}
		var claimed struct{ Todos []struct{ ID string } }
		if err := json.Unmarshal(raw, &claimed); err != nil || len(claimed.Todos) != max {
			t.Fatalf("claimed %s: %v", raw, err)
		}
		var forward, backward []map[string]string
		for i, td := range claimed.Todos {
			forward = append(forward, map[string]string{"id": td.ID})
			backward = append(backward, map[string]string{"id": claimed.Todos[max-1-i].ID})
		}
		answers := make([][]byte, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for k, items := range [][]map[string]string{forward, backward} {
			body, _ := json.Marshal(items)
			wg.Go(func() { answers[k], errs[k] = st.FinishMany(ctx, store.Complete, ep, body) })
		}
		wg.Wait()
		done := map[string]int{}
		for k := range answers {
			if errs[k] != nil {
				t.Fatalf("round %d: batch %d: %v", round, k, errs[k])
			}
			var res struct {
				Results []struct {
					ID   string
					OK   bool
					Code string
				}
			}
			if err := json.Unmarshal(answers[k], &res); err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Results {
				if r.OK {
					done[r.ID]++
				} else if r.Code != store.CodeConflict {
					t.Fatalf("round %d: %s answered %s", round, r.ID, r.Code)
				}
			}
		}
		for _, td := range claimed.Todos {
			if done[td.ID] != 1 {
				t.Fatalf("round %d: todo %s completed %d times", round, td.ID, done[td.ID])
			}
		}
	}
}
