package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The OAuth authorization server's storage (server/oauth, db/code/oauth.sql). Codes, tokens and
// client ids travel as their sha256; documents as jsonb.

// OAuthClientGet: switchboard.oauth_client_get — a registered client's document, nil when
// there is none.
func (s *Store) OAuthClientGet(ctx context.Context, idHash []byte) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.oauth_client_get($1)`, idHash)
}

// OAuthClient is a client to record: its id's hash, name, redirect URIs and metadata document.
type OAuthClient struct {
	IDHash       []byte
	Name         string
	RedirectURIs []string
	Document     []byte
	TTL          time.Duration // how long the row is kept
}

// OAuthClientCache records a client metadata document fetched from its URL (kind cimd).
func (s *Store) OAuthClientCache(ctx context.Context, c OAuthClient) error {
	if _, err := s.pool.Exec(ctx, `SELECT switchboard.oauth_client_put($1, 'cimd', $2, $3, $4, $5, 0)`,
		c.IDHash, c.Name, c.RedirectURIs, c.Document, c.TTL); err != nil {
		return Classify(err)
	}
	return nil
}

// OAuthClientRegister records a client of Dynamic Client Registration (kind dcr); ok is false
// when registrations already reached perMinute in the last minute.
func (s *Store) OAuthClientRegister(ctx context.Context, c OAuthClient, perMinute int) (ok bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT switchboard.oauth_client_put($1, 'dcr', $2, $3, $4, $5, $6)`,
		c.IDHash, c.Name, c.RedirectURIs, c.Document, c.TTL, perMinute).Scan(&ok)
	if err != nil {
		return false, Classify(err)
	}
	return ok, nil
}

// OAuthApprove: switchboard.oauth_approve — checks an approval code (by its hash) and records
// the grant of an endpoint to a client.
func (s *Store) OAuthApprove(ctx context.Context, endpoint string, codeHash, clientHash []byte,
	clientName, redirectHost string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.oauth_approve($1, $2, $3, $4, $5)`,
		endpoint, codeHash, clientHash, clientName, redirectHost)
}

// OAuthEndpoint: switchboard.oauth_endpoint — what the consent page shows of an active
// endpoint, nil when there is none.
func (s *Store) OAuthEndpoint(ctx context.Context, slug string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.oauth_endpoint($1)`, slug)
}

// OAuthToken is a code or token row to store, keyed by the hash of its signature.
type OAuthToken struct {
	Kind      string // code, pkce, access, refresh
	Hash      []byte
	RequestID string
	GrantID   string
	Expires   time.Time
	Request   []byte // the fosite request as JSON
}

// OAuthTokenPut: switchboard.oauth_token_put.
func (s *Store) OAuthTokenPut(ctx context.Context, t OAuthToken) error {
	if _, err := s.pool.Exec(ctx, `SELECT switchboard.oauth_token_put($1, $2, $3, $4, $5, $6)`,
		t.Kind, t.Hash, t.RequestID, t.GrantID, t.Expires, t.Request); err != nil {
		return Classify(err)
	}
	return nil
}

// OAuthTokenGet: switchboard.oauth_token_get — the stored request and whether it is still
// active; found is false when there is no such row.
func (s *Store) OAuthTokenGet(ctx context.Context, kind string, hash []byte) (request []byte, active, found bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT request, active FROM switchboard.oauth_token_get($1, $2)`, kind, hash).
		Scan(&request, &active)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, false, nil
	}
	if err != nil {
		return nil, false, false, Classify(err)
	}
	return request, active, true, nil
}

// OAuthTokenDeactivate: switchboard.oauth_token_deactivate; ok reports whether a row was active.
func (s *Store) OAuthTokenDeactivate(ctx context.Context, kind string, hash []byte) (ok bool, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT switchboard.oauth_token_deactivate($1, $2)`, kind, hash).Scan(&ok); err != nil {
		return false, Classify(err)
	}
	return ok, nil
}

// OAuthTokenRevokeFamily: switchboard.oauth_token_revoke_family — every row of a request.
func (s *Store) OAuthTokenRevokeFamily(ctx context.Context, kind, requestID string) error {
	if _, err := s.pool.Exec(ctx, `SELECT switchboard.oauth_token_revoke_family($1, $2)`, kind, requestID); err != nil {
		return Classify(err)
	}
	return nil
}

// OAuthTokenDelete: switchboard.oauth_token_delete.
func (s *Store) OAuthTokenDelete(ctx context.Context, kind string, hash []byte) error {
	if _, err := s.pool.Exec(ctx, `SELECT switchboard.oauth_token_delete($1, $2)`, kind, hash); err != nil {
		return Classify(err)
	}
	return nil
}
