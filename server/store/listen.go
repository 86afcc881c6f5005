package store

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Listener is a connection of its own (outside the pool) LISTENing on channels of the schema's
// pg_notify calls (the doorbell's).
type Listener struct {
	conn *pgx.Conn
}

// Listen opens a connection configured as the pool's (same login and role), named
// applicationName in pg_stat_activity, and LISTENs on channels. Errors are the driver's: the
// caller logs them and reconnects.
func (s *Store) Listen(ctx context.Context, applicationName string, channels ...string) (*Listener, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = applicationName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	var sql strings.Builder
	for _, ch := range channels {
		sql.WriteString("LISTEN " + pgx.Identifier{ch}.Sanitize() + "; ")
	}
	if _, err := conn.Exec(ctx, sql.String()); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return &Listener{conn: conn}, nil
}

// Wait returns the next notification: its channel and payload.
func (l *Listener) Wait(ctx context.Context) (channel, payload string, err error) {
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		return "", "", err
	}
	return n.Channel, n.Payload, nil
}

// Close closes the connection.
func (l *Listener) Close(ctx context.Context) error { return l.conn.Close(ctx) }
