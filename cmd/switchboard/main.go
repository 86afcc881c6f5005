package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"switchboard/db"
)

func main() {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil { panic(err) }
	n, v, err := db.Migrate(ctx, c)
	fmt.Println(n, v, err); if err != nil { os.Exit(1) }
}
