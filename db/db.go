// Package db holds the schema: tern migrations that create the tables (db/migrations) and the
// code package that holds Switchboard's logic, its PL/pgSQL functions, views and triggers
// (db/code). Both are embedded so the one binary can apply them; the same files work with the
// tern CLI (see tern.conf).
package db

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrations embed.FS

//go:embed code/*.sql
var code embed.FS

// VersionTable records the applied migration version (shared with tern.conf).
const VersionTable = "public.switchboard_schema_version"

// ternLock is the advisory lock tern takes around migrations and code installs; holding it for
// the whole transaction serializes this migrate with other migrates and with the tern CLI.
const ternLock = 9628173550095224

// Code is the code package (install.sql and the files it includes).
func Code() fs.FS {
	sub, err := fs.Sub(code, "code")
	if err != nil {
		panic(err)
	}
	return sub
}

// Migrations are the migrations (NNN_name.sql), for tests that add one.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err)
	}
	return sub
}

// Migrate applies every pending migration and then installs the code package unless it is
// installed already (see MigrateWith), with the default lock timeout and retries. It reports how
// many migrations ran and the resulting version.
func Migrate(ctx context.Context, conn *pgx.Conn) (applied int, version int32, err error) {
	res, err := MigrateWith(ctx, conn, Options{})
	return res.Applied, res.Version, err
}

// Fingerprint identifies the embedded migrations and code package (a hash of their names and
// contents), so test templates built from an older schema are never reused.
func Fingerprint() string {
	h := sha256.New()
	for _, dir := range []struct {
		fsys embed.FS
		name string
	}{{migrations, "migrations"}, {code, "code"}} {
		entries, _ := fs.ReadDir(dir.fsys, dir.name)
		for _, e := range entries {
			b, _ := dir.fsys.ReadFile(path.Join(dir.name, e.Name()))
			fmt.Fprintf(h, "%s/%s\x00%d\x00", dir.name, e.Name(), len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
