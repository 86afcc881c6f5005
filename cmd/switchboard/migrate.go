package main

import (
	"context"
	"fmt"
	"io"

	"switchboard/db"
)

// switchboard migrate → {"applied": N, "version": V}
func runMigrate(ctx context.Context, c *cli, args []string) error {
	if _, err := c.parse(c.flags(), args); err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	applied, version, err := db.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	return c.emit(map[string]any{"applied": applied, "version": version}, func(w io.Writer) {
		fmt.Fprintf(w, "applied %d migration(s); schema version %d\n", applied, version)
	})
}
