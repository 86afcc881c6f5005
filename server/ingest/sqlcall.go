package ingest

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ingestSQL stores one delivery; the casts name every parameter's type, since the parameters are
// sent as text.
const ingestSQL = `SELECT switchboard.ingest_if_current($1::uuid, $2::text, $3::text, $4::boolean, $5::text,
	$6::text, $7::int, $8::jsonb, $9::jsonb, $10::text, $11::text, $12::jsonb, $13::text, $14::uuid[], $15::text,
	$16::bigint)::text`

// callIngest runs ingestSQL with parameters already in PostgreSQL's text format, so the payload
// goes from the buffer it was read into straight into the connection's write buffer: one copy.
// pgx's Query would first encode it into a parameter buffer and copy it from there, one more
// full copy of every body (25 MiB for a large GitHub push). The statement is prepared once per
// connection, as Query would do.
func callIngest(ctx context.Context, pool *pgxpool.Pool, params [][]byte) ([]byte, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	sd, err := conn.Conn().Prepare(ctx, "switchboard_ingest", ingestSQL)
	if err != nil {
		return nil, err
	}
	rr := conn.Conn().PgConn().ExecPrepared(ctx, sd.Name, params, nil, nil)
	var out []byte
	for rr.NextRow() {
		out = append(out[:0], rr.Values()[0]...) // Values are only valid until the next row
	}
	if _, err := rr.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// Text-format parameter values; nil is SQL NULL.

func textParam(s string) []byte { return []byte(s) }

func nullableParam(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func boolParam(b bool) []byte {
	if b {
		return []byte("t")
	}
	return []byte("f")
}

func intParam(n int64) []byte { return strconv.AppendInt(nil, n, 10) }

// uuidArrayParam is a uuid[] literal; uuids need no quoting. nil stays NULL.
func uuidArrayParam(ids []string) []byte {
	if ids == nil {
		return nil
	}
	return []byte("{" + strings.Join(ids, ",") + "}")
}
