// Package db holds the schema: tern migrations that create the tables and the PL/pgSQL functions
// that are Switchboard's logic. The migrations are embedded so the one binary can apply them;
// the same files work with the tern CLI (see tern.conf).
package db

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// VersionTable records the applied migration version (shared with tern.conf).
const VersionTable = "public.switchboard_schema_version"

// Migrate applies every pending migration and reports how many ran and the resulting version.
func Migrate(ctx context.Context, conn *pgx.Conn) (applied int, version int32, err error) {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return 0, 0, fmt.Errorf("migrator: %w", err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return 0, 0, err
	}
	if err := m.LoadMigrations(sub); err != nil {
		return 0, 0, fmt.Errorf("load migrations: %w", err)
	}
	before, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("current version: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return 0, 0, fmt.Errorf("migrate: %w", err)
	}
	after, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("current version: %w", err)
	}
	return int(after - before), after, nil
}

// Fingerprint identifies the embedded migrations (a hash of their names and contents), so test
// templates built from an older schema are never reused.
func Fingerprint() string {
	h := sha256.New()
	entries, _ := fs.ReadDir(migrations, "migrations")
	for _, e := range entries {
		b, _ := migrations.ReadFile("migrations/" + e.Name())
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}
