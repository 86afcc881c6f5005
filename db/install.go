package db

// The install of the code package under live traffic (docs/sql.md, "Installing the code"):
// skipped when the installed package has the same fingerprint; otherwise one statement at a
// time in one transaction, CREATE OR REPLACE in place (so OIDs, grants and callers' plans
// survive), with the two changes CREATE OR REPLACE refuses handled here, triggers re-created only
// when their statement changed, and every lock wait bounded by lock_timeout and retried.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"
)

// Defaults of Options.
const (
	DefaultLockTimeout = 500 * time.Millisecond
	DefaultRetryFor    = 2 * time.Minute
)

// Code reports of Result.
const (
	CodeInstalled = "installed"
	CodeUnchanged = "unchanged"
)

// Options tune MigrateWith. The zero value is what `switchboard migrate` does by default.
type Options struct {
	// Code is the code package (install.sql and the files it includes); nil: the embedded one.
	Code fs.FS
	// Migrations are the migrations (NNN_name.sql); nil: the embedded ones (db/migrations).
	Migrations fs.FS
	// Reinstall installs the package even when the installed one has the same fingerprint.
	Reinstall bool
	// LockTimeout bounds every lock wait of the transaction (PostgreSQL's lock_timeout), so a
	// migrate queued behind a long transaction holds up the calls queued behind it no longer
	// than this; 0: DefaultLockTimeout.
	LockTimeout time.Duration
	// RetryFor is how long a transaction that hit the lock timeout is retried (with backoff)
	// before MigrateWith gives up; 0: DefaultRetryFor.
	RetryFor time.Duration
	// OnRetry, when set, hears of every retry (attempt is the one that failed).
	OnRetry func(attempt int, wait time.Duration, err error)
}

// Result is what MigrateWith did.
type Result struct {
	Applied     int    // migrations applied
	Version     int32  // schema version afterwards
	Code        string // CodeInstalled or CodeUnchanged
	Fingerprint string // the code package's
	Attempts    int    // transactions tried (more than 1 after lock timeouts)
}

// MigrateWith applies every pending migration and then installs the code package, in one
// transaction: a failure anywhere leaves the database as it was. The install is skipped when no
// migration ran and the package's fingerprint is the one recorded in switchboard.code_package.
// A transaction that waited longer than the lock timeout for a lock is rolled back and tried
// again after a backoff, for up to RetryFor.
func MigrateWith(ctx context.Context, conn *pgx.Conn, opts Options) (Result, error) {
	if opts.Code == nil {
		opts.Code = Code()
	}
	if opts.Migrations == nil {
		opts.Migrations = Migrations()
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = DefaultRetryFor
	}
	pkg, err := migrate.LoadCodePackage(opts.Code)
	if err != nil {
		return Result{}, fmt.Errorf("load code package: %w", err)
	}
	install, err := pkg.Eval(map[string]any{})
	if err != nil {
		return Result{}, fmt.Errorf("code package: %w", err)
	}
	sum := sha256.Sum256([]byte(install))
	fp := hex.EncodeToString(sum[:])

	deadline := time.Now().Add(opts.RetryFor)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		res, err := migrateOnce(ctx, conn, install, fp, opts)
		res.Attempts, res.Fingerprint = attempt, fp
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55P03" || time.Now().After(deadline) {
			return res, err
		}
		// Full jitter, so two migrates that collided do not collide again.
		wait := backoff/2 + rand.N(backoff/2+1)
		if opts.OnRetry != nil {
			opts.OnRetry(attempt, wait, err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func migrateOnce(ctx context.Context, conn *pgx.Conn, install, fp string, opts Options) (Result, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return Result{}, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)",
		fmt.Sprintf("%dms", opts.LockTimeout.Milliseconds())); err != nil {
		return Result{}, err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(ternLock)); err != nil {
		return Result{}, fmt.Errorf("migration lock: %w", err)
	}
	// The migrator runs on the same connection, inside this transaction (DisableTx: it must not
	// commit each migration on its own).
	m, err := migrate.NewMigratorEx(ctx, conn, VersionTable, &migrate.MigratorOptions{DisableTx: true})
	if err != nil {
		return Result{}, fmt.Errorf("migrator: %w", err)
	}
	if err := m.LoadMigrations(opts.Migrations); err != nil {
		return Result{}, fmt.Errorf("load migrations: %w", err)
	}
	before, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("current version: %w", err)
	}
	if int(before) > len(m.Migrations) {
		return Result{}, fmt.Errorf("schema version %d is newer than this binary's %d migrations: "+
			"a database made before the migrations were squashed must be created again "+
			"(drop it, or `make clean-db` for the private cluster)", before, len(m.Migrations))
	}
	if err := m.Migrate(ctx); err != nil {
		return Result{}, fmt.Errorf("migrate: %w", err)
	}
	after, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("current version: %w", err)
	}
	res := Result{Applied: int(after - before), Version: after, Code: CodeUnchanged}

	var installed *string
	var triggers map[string]string
	err = tx.QueryRow(ctx, "SELECT fingerprint, triggers FROM switchboard.code_package").Scan(&installed, &triggers)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("installed code package: %w", err)
	}
	if res.Applied == 0 && !opts.Reinstall && installed != nil && *installed == fp {
		return res, tx.Commit(ctx)
	}
	in := installer{tx: tx, oldTriggers: triggers, triggers: map[string]string{}}
	if err := in.run(ctx, install); err != nil {
		return res, err
	}
	marks, _ := json.Marshal(in.triggers)
	if _, err := tx.Exec(ctx, `
		INSERT INTO switchboard.code_package AS p (one, fingerprint, triggers, installed_at)
		VALUES (true, $1, $2, now())
		ON CONFLICT (one) DO UPDATE
		   SET fingerprint = excluded.fingerprint, triggers = excluded.triggers, installed_at = excluded.installed_at`,
		fp, marks); err != nil {
		return res, fmt.Errorf("record the code package: %w", err)
	}
	res.Code = CodeInstalled
	return res, tx.Commit(ctx)
}

// The statements the installer treats specially (matched after leading comments).
var (
	reRoutine = regexp.MustCompile(`(?is)^CREATE\s+OR\s+REPLACE\s+(?:FUNCTION|PROCEDURE)\s+((?:"[^"]+"|\w+)\.)?("[^"]+"|\w+)\s*\(`)
	reView    = regexp.MustCompile(`(?is)^CREATE\s+OR\s+REPLACE\s+(?:RECURSIVE\s+)?VIEW\s+((?:"[^"]+"|\w+)\.)?("[^"]+"|\w+)`)
	reTrigger = regexp.MustCompile(`(?is)^CREATE\s+(OR\s+REPLACE\s+)?(?:CONSTRAINT\s+)?TRIGGER\s+("[^"]+"|\w+)\s.*?\sON\s+((?:(?:"[^"]+"|\w+)\.)?(?:"[^"]+"|\w+))`)
	reSpace   = regexp.MustCompile(`\s+`)
)

// installer runs the code package's statements in the migrate's transaction.
type installer struct {
	tx          pgx.Tx
	oldTriggers map[string]string // trigger → statement hash, as the last install recorded
	triggers    map[string]string // the same for this package
	kept        []string          // OIDs of triggers left as they were
}

func (in *installer) run(ctx context.Context, sql string) error {
	for i, st := range splitStatements(sql) {
		head := stripComments(st)
		var err error
		switch m := reRoutine.FindStringSubmatchIndex(head); {
		case m != nil:
			err = in.routine(ctx, head, m)
		case reView.MatchString(head):
			err = in.view(ctx, head, reView.FindStringSubmatch(head))
		case reTrigger.MatchString(head):
			err = in.trigger(ctx, head, reTrigger.FindStringSubmatch(head))
		default:
			_, err = in.tx.Exec(ctx, head)
			if err != nil {
				err = fmt.Errorf("code package statement %d: %w", i+1, err)
			}
		}
		if err != nil {
			return fmt.Errorf("install code package: %w", err)
		}
	}
	return nil
}

// trySavepoint runs one statement under a savepoint: on failure the transaction goes on as
// before it, and the error is returned.
func (in *installer) trySavepoint(ctx context.Context, st string) error {
	// "\n;": the statement may end in a -- comment.
	if _, err := in.tx.Exec(ctx, "SAVEPOINT sb_install;\n"+st+"\n;\nRELEASE SAVEPOINT sb_install"); err != nil {
		if _, rerr := in.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT sb_install; RELEASE SAVEPOINT sb_install"); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	return nil
}

func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// unquote is an identifier as the catalogue holds it.
func unquote(id string) string {
	if strings.HasPrefix(id, `"`) {
		return strings.ReplaceAll(id[1:len(id)-1], `""`, `"`)
	}
	return strings.ToLower(id)
}

// routine runs CREATE OR REPLACE FUNCTION/PROCEDURE. When PostgreSQL refuses to replace the
// existing routine of the same name and argument types (its return type, OUT columns, parameter
// names or defaults changed, or function became procedure), that routine is dropped and the new
// one created: it gets a new OID, so the callers of the old one must be gone (expand, then
// contract: docs/sql.md).
func (in *installer) routine(ctx context.Context, st string, m []int) error {
	name := st[m[4]:m[5]]
	err := in.trySavepoint(ctx, st)
	if err == nil {
		return nil
	}
	if code := sqlstate(err); code != "42P13" && code != "42809" {
		return fmt.Errorf("routine %s: %w", st[m[4]:m[5]], err)
	}
	// Which routine is in the way: create the new one under a probe name, find the existing
	// routine with its name and argument types, and undo the probe.
	probe := name + "__sb_probe"
	if strings.HasPrefix(name, `"`) {
		probe = name[:len(name)-1] + `__sb_probe"`
	}
	schema := ""
	if m[2] >= 0 {
		schema = st[m[2]:m[3]]
	}
	if _, perr := in.tx.Exec(ctx, "SAVEPOINT sb_probe;\n"+st[:m[4]]+probe+st[m[5]:]+"\n;"); perr != nil {
		return fmt.Errorf("routine %s%s: %w", schema, name, errors.Join(err, perr))
	}
	var old []string
	rows, qerr := in.tx.Query(ctx, `
		SELECT o.oid::regprocedure::text
		  FROM pg_proc n
		  JOIN pg_proc o ON o.pronamespace = n.pronamespace AND o.proname = $2 AND o.proargtypes = n.proargtypes
		 WHERE n.oid = to_regproc($1)`, schema+probe, unquote(name))
	if qerr == nil {
		old, qerr = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if _, rerr := in.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT sb_probe; RELEASE SAVEPOINT sb_probe"); rerr != nil || qerr != nil {
		return errors.Join(err, qerr, rerr)
	}
	if len(old) != 1 {
		return fmt.Errorf("routine %s%s: %w", schema, name, err)
	}
	if _, err := in.tx.Exec(ctx, "DROP ROUTINE "+old[0]); err != nil {
		return fmt.Errorf("routine %s changed its result or parameters; dropping the old one: %w", old[0], err)
	}
	if _, err := in.tx.Exec(ctx, st); err != nil {
		return fmt.Errorf("routine %s%s: %w", schema, name, err)
	}
	return nil
}

// view runs CREATE OR REPLACE VIEW. A view that loses, renames, reorders or retypes a column
// cannot be replaced: it is dropped and created again (an object outside the package that
// depends on it stops the install).
func (in *installer) view(ctx context.Context, st string, m []string) error {
	name := m[1] + m[2]
	err := in.trySavepoint(ctx, st)
	if err == nil {
		return nil
	}
	if sqlstate(err) != "42P16" {
		return fmt.Errorf("view %s: %w", name, err)
	}
	if _, err := in.tx.Exec(ctx, "DROP VIEW "+name); err != nil {
		return fmt.Errorf("view %s changed its columns; dropping the old one: %w", name, err)
	}
	if _, err := in.tx.Exec(ctx, st); err != nil {
		return fmt.Errorf("view %s: %w", name, err)
	}
	return nil
}

// trigger re-creates a trigger only when its statement changed since the last install: creating
// one locks its table against every write (SHARE ROW EXCLUSIVE), waiting behind every open
// transaction on it, and makes every write wait behind it.
func (in *installer) trigger(ctx context.Context, st string, m []string) error {
	orReplace, name, table := m[1] != "", m[2], m[3]
	key := table + " " + name
	sum := sha256.Sum256([]byte(reSpace.ReplaceAllString(st, " ")))
	hash := hex.EncodeToString(sum[:])
	in.triggers[key] = hash
	var oid *string
	err := in.tx.QueryRow(ctx, `SELECT oid::text FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = $2`,
		table, unquote(name)).Scan(&oid)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("trigger %s: %w", key, err)
	}
	if oid != nil && in.oldTriggers[key] == hash {
		// Unchanged: tell the leftovers step of install.sql that the package still has it.
		in.kept = append(in.kept, *oid)
		_, err := in.tx.Exec(ctx, "SELECT set_config('switchboard.install_kept_triggers', $1, true)",
			strings.Join(in.kept, ","))
		return err
	}
	if oid != nil && !orReplace {
		if _, err := in.tx.Exec(ctx, fmt.Sprintf("DROP TRIGGER %s ON %s", name, table)); err != nil {
			return fmt.Errorf("trigger %s: %w", key, err)
		}
	}
	if _, err := in.tx.Exec(ctx, st); err != nil {
		return fmt.Errorf("trigger %s: %w", key, err)
	}
	return nil
}
