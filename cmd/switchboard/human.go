package main

import (
	"context"
	"fmt"
	"io"

	"switchboard/server/store"
)

// switchboard human add NAME → {"id", "name"}
func runHumanAdd(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flags(), args, "NAME")
	if err != nil {
		return err
	}
	h, err := c.object(ctx, func(o *store.Operator) ([]byte, error) { return o.HumanAdd(ctx, pos[0]) })
	if err != nil {
		return err
	}
	return c.emit(h, func(w io.Writer) {
		fmt.Fprintf(w, "added human %s (id %s)\n", text(h["name"]), text(h["id"]))
	})
}
