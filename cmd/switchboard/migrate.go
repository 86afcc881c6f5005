package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"switchboard/db"
)

// switchboard migrate → {"applied": N, "version": V, "code": "installed"|"unchanged", "attempts": A}
//
// Safe under live traffic (docs/operations.md, "Upgrades"): the code package is installed only
// when it changed, in place; every lock wait is bounded by --lock-timeout and the transaction is
// retried with backoff for up to --retry-for.
func runMigrate(ctx context.Context, c *cli, args []string) error {
	fs := c.flags()
	reinstall := fs.Bool("reinstall", false, "install the code package even when it is installed already")
	lockTimeout := fs.Duration("lock-timeout", db.DefaultLockTimeout, "longest wait for one lock before the transaction is retried")
	retryFor := fs.Duration("retry-for", db.DefaultRetryFor, "how long to keep retrying after lock timeouts")
	if _, err := c.parse(fs, args); err != nil {
		return err
	}
	if *lockTimeout < time.Millisecond || *retryFor < 0 {
		return usagef("migrate: --lock-timeout must be at least 1ms and --retry-for not negative")
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	res, err := conn.Migrate(ctx, db.Options{
		Reinstall: *reinstall, LockTimeout: *lockTimeout, RetryFor: *retryFor,
		OnRetry: func(attempt int, wait time.Duration, _ error) {
			fmt.Fprintf(os.Stderr, "migrate: a lock was not granted within %v (attempt %d); retrying in %v\n",
				*lockTimeout, attempt, wait.Round(time.Millisecond))
		},
	})
	if err != nil {
		return err
	}
	return c.emit(map[string]any{"applied": res.Applied, "version": res.Version, "code": res.Code, "attempts": res.Attempts},
		func(w io.Writer) {
			fmt.Fprintf(w, "applied %d migration(s); schema version %d; code package %s\n", res.Applied, res.Version, res.Code)
		})
}
