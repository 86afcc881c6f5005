package sqltest

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/tern/v2/migrate"

	"switchboard/db"
	"switchboard/tests/testdb"
)

// oids lists every function, view and trigger of the schema with its OID.
func oids(d *DB) []string {
	return names(d, `
		SELECT p.oid::regprocedure || ' ' || p.oid FROM pg_proc p WHERE p.pronamespace = 'switchboard'::regnamespace
		UNION ALL
		SELECT c.oid::regclass || ' ' || c.oid FROM pg_class c WHERE c.relnamespace = 'switchboard'::regnamespace AND c.relkind = 'v'
		UNION ALL
		SELECT t.tgname || ' ' || t.oid FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		 WHERE c.relnamespace = 'switchboard'::regnamespace AND NOT t.tgisinternal
		 ORDER BY 1`)
}

// A migrate whose package is installed installs nothing; a changed package is installed in
// place: every function, view and trigger keeps its OID, only the changed body differs, and an
// unchanged trigger is not created again (its table is not locked).
func TestInstallInPlace(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	conn := connect(t, d.URL)
	before, code := oids(d), schemaCode(d)

	res, err := db.MigrateWith(ctx(), conn, db.Options{})
	if err != nil || res.Code != db.CodeUnchanged || res.Applied != 0 {
		t.Fatalf("migrate with nothing to do: %+v %v", res, err)
	}
	var fp string
	if err := d.QueryRow(ctx(), `SELECT fingerprint FROM switchboard.code_package`).Scan(&fp); err != nil || fp != res.Fingerprint {
		t.Fatalf("recorded fingerprint %q, %v; want %q", fp, err, res.Fingerprint)
	}

	changed := testdb.ChangedCode(t, "queue.sql", "    -- The grant, and whether this endpoint has expired leases",
		"    -- (a changed copy)\n    -- The grant, and whether this endpoint has expired leases")
	res, err = db.MigrateWith(ctx(), conn, db.Options{Code: changed})
	if err != nil || res.Code != db.CodeInstalled {
		t.Fatalf("changed package: %+v %v", res, err)
	}
	if after := oids(d); !slices.Equal(before, after) {
		t.Fatalf("the install replaced objects:\nbefore %v\nafter  %v", before, after)
	}
	if after := schemaCode(d); slices.Equal(code, after) {
		t.Fatal("the changed body was not installed")
	}
	res, err = db.MigrateWith(ctx(), conn, db.Options{})
	if err != nil || res.Code != db.CodeInstalled {
		t.Fatalf("the real package again: %+v %v", res, err)
	}
	if after := schemaCode(d); !slices.Equal(code, after) {
		t.Fatalf("the real package again differs:\nbefore %v\nafter  %v", code, after)
	}
	if after := oids(d); !slices.Equal(before, after) {
		t.Fatalf("the install replaced objects:\nbefore %v\nafter  %v", before, after)
	}

	// A changed trigger is created again (same name, new definition), and only it.
	trig := testdb.ChangedCode(t, "identity.sql", "WHEN (OLD.state = 'active' AND NEW.state <> 'active')",
		"WHEN (OLD.state = 'active' AND NEW.state IS DISTINCT FROM 'active')")
	if _, err := db.MigrateWith(ctx(), conn, db.Options{Code: trig}); err != nil {
		t.Fatal(err)
	}
	def := names(d, `SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'endpoints_revoked'`)
	if len(def) != 1 || !strings.Contains(def[0], "IS DISTINCT FROM") {
		t.Fatalf("changed trigger not installed: %v", def)
	}
	if _, err := db.MigrateWith(ctx(), conn, db.Options{}); err != nil {
		t.Fatal(err)
	}
	if after := schemaCode(d); !slices.Equal(code, after) {
		t.Fatalf("after the trigger round trip:\nbefore %v\nafter  %v", code, after)
	}
}

// What CREATE OR REPLACE refuses is installed all the same: a function whose return type
// changed, one whose OUT columns changed (a runtime entry point, which keeps its grant and its
// pinned search_path), one whose parameter was renamed, and a view that lost a column.
func TestInstallReplacesWhatCreateOrReplaceCannot(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	conn := connect(t, d.URL)
	code := schemaCode(d)

	// The database holds another release's definitions.
	d.exec(`DROP FUNCTION switchboard.trust_mode(text)`)
	d.exec(`CREATE FUNCTION switchboard.trust_mode(p_source_type text) RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	d.exec(`DROP FUNCTION switchboard.reap()`)
	d.exec(`CREATE FUNCTION switchboard.reap(OUT requeued int, OUT dead_lettered int) LANGUAGE sql AS 'SELECT 0, 0'`)
	d.exec(`DROP FUNCTION switchboard.as_uuid(text)`)
	d.exec(`CREATE FUNCTION switchboard.as_uuid(p_other text) RETURNS uuid LANGUAGE sql AS 'SELECT NULL::uuid'`)
	d.exec(`CREATE OR REPLACE VIEW switchboard.leases_expiring AS
	        SELECT t.id, e.slug, t.queue, t.owner, t.attempt, t.max_attempts, t.lease_expires_at,
	               t.lease_expires_at - now() AS remaining, 1 AS extra
	          FROM switchboard.todos t JOIN switchboard.endpoints e ON e.id = t.endpoint_id`)

	res, err := db.MigrateWith(ctx(), conn, db.Options{Reinstall: true})
	if err != nil || res.Code != db.CodeInstalled {
		t.Fatalf("install over the other release: %+v %v", res, err)
	}
	if after := schemaCode(d); !slices.Equal(code, after) {
		t.Fatalf("the package is not what it installs on an empty schema:\nwant %v\ngot  %v", code, after)
	}
	var ok bool
	if err := d.QueryRow(ctx(), `SELECT has_function_privilege('switchboard_runtime', 'switchboard.reap()', 'EXECUTE')
	                               AND p.prosecdef AND 'search_path=pg_catalog, pg_temp' = ANY (p.proconfig)
	                              FROM pg_proc p WHERE p.oid = 'switchboard.reap()'::regprocedure`).Scan(&ok); err != nil || !ok {
		t.Fatalf("re-created entry point reap(): granted and pinned %v, %v", ok, err)
	}
}

// `tern code install db/code` (tern's InstallCodePackage) installs the package as one script;
// it records no fingerprint, so the next migrate installs again.
func TestTernCodeInstall(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	conn := connect(t, d.URL)
	code := schemaCode(d)
	pkg, err := migrate.LoadCodePackage(db.Code())
	if err != nil {
		t.Fatal(err)
	}
	d.exec(`CREATE FUNCTION switchboard.gone() RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	if err := migrate.InstallCodePackage(ctx(), conn, map[string]any{}, pkg); err != nil {
		t.Fatalf("tern code install: %v", err)
	}
	if after := schemaCode(d); !slices.Equal(code, after) {
		t.Fatalf("tern code install:\nwant %v\ngot  %v", code, after)
	}
	res, err := db.MigrateWith(ctx(), conn, db.Options{})
	if err != nil || res.Code != db.CodeInstalled {
		t.Fatalf("migrate after tern: %+v %v", res, err)
	}
}

// A migrate that needs a lock someone holds waits at most its lock timeout per attempt, and
// retries with backoff until it gets it.
func TestMigrateRetriesLockTimeouts(t *testing.T) {
	t.Parallel()
	d := fresh(t)
	conn := connect(t, d.URL)
	holder, err := d.Begin(ctx())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx(), `LOCK TABLE switchboard.code_package IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(time.Second)
		_ = holder.Commit(ctx())
	}()
	extra := withMigration(t, `ALTER TABLE switchboard.code_package ADD COLUMN probe int;`)
	retries := 0
	start := time.Now()
	res, err := db.MigrateWith(ctx(), conn, db.Options{Migrations: extra, LockTimeout: 100 * time.Millisecond,
		OnRetry: func(int, time.Duration, error) { retries++ }})
	if err != nil || res.Attempts < 2 || retries != res.Attempts-1 || res.Applied != 1 {
		t.Fatalf("migrate behind a lock: %+v retries=%d %v", res, retries, err)
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("migrated in %v while the lock was held for 1 s", el)
	}
}

// withMigration is the embedded migrations plus one more after them.
func withMigration(t *testing.T, sql string) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	entries, err := fs.ReadDir(db.Migrations(), ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(db.Migrations(), e.Name())
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = &fstest.MapFile{Data: b}
	}
	out[fmt.Sprintf("%03d_test.sql", len(entries)+1)] = &fstest.MapFile{Data: []byte(sql)}
	return out
}
