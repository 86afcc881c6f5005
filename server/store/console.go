package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The human console (server/console; db/code/console.sql and console_auth.sql). Every screen's
// function takes the signed-in human's id and answers only what that human may see; a nil
// answer is "not found" (another human's id, a malformed id and an unknown id alike). Invite
// tokens and session ids travel as their sha256.

// ConsoleHuman is a signed-in human.
type ConsoleHuman struct {
	ID       string
	Name     string
	Operator bool
}

// ConsoleSession: switchboard.console_session_get — the human of a live session; ok is false
// when the session is unknown, ended or expired.
func (s *Store) ConsoleSession(ctx context.Context, idHash []byte) (h ConsoleHuman, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT human_id, name, operator FROM switchboard.console_session_get($1)`, idHash).
		Scan(&h.ID, &h.Name, &h.Operator)
	if errors.Is(err, pgx.ErrNoRows) {
		return ConsoleHuman{}, false, nil
	}
	if err != nil {
		return ConsoleHuman{}, false, Classify(err)
	}
	return h, true, nil
}

// ConsoleSessionStart: switchboard.console_session_start.
func (s *Store) ConsoleSessionStart(ctx context.Context, human string, idHash []byte, idle, absolute time.Duration) error {
	return s.exec(ctx, `SELECT switchboard.console_session_start($1, $2, $3, $4)`, human, idHash, idle, absolute)
}

// ConsoleSessionEnd: switchboard.console_session_end (sign-out).
func (s *Store) ConsoleSessionEnd(ctx context.Context, idHash []byte) error {
	return s.exec(ctx, `SELECT switchboard.console_session_end($1)`, idHash)
}

// ConsoleInviteOpen: switchboard.console_invite_open — {human_id, name, passkeys} of a live
// invite, nil otherwise.
func (s *Store) ConsoleInviteOpen(ctx context.Context, tokenHash []byte) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_invite_open($1)`, tokenHash)
}

// ConsoleCeremonyPut: switchboard.console_ceremony_put (invite is nil for a sign-in).
func (s *Store) ConsoleCeremonyPut(ctx context.Context, idHash []byte, kind string, invite []byte, data []byte, ttl time.Duration) error {
	return s.exec(ctx, `SELECT switchboard.console_ceremony_put($1, $2, $3, $4, $5)`, idHash, kind, invite, data, ttl)
}

// ConsoleCeremonyTake: switchboard.console_ceremony_take — {data, invite}, nil when none.
func (s *Store) ConsoleCeremonyTake(ctx context.Context, idHash []byte, kind string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_ceremony_take($1, $2)`, idHash, kind)
}

// ConsolePasskeyRegister: switchboard.console_passkey_register — {human_id, passkey_id}, nil
// when the invite is no longer live.
func (s *Store) ConsolePasskeyRegister(ctx context.Context, invite, credentialID, credential []byte) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_passkey_register($1, $2, $3)`, invite, credentialID, credential)
}

// ConsoleWebAuthnUser: switchboard.console_webauthn_user — {human_id, name, credentials}.
func (s *Store) ConsoleWebAuthnUser(ctx context.Context, human string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_webauthn_user($1)`, human)
}

// ConsolePasskeyUsed: switchboard.console_passkey_used.
func (s *Store) ConsolePasskeyUsed(ctx context.Context, credentialID, credential []byte) error {
	return s.exec(ctx, `SELECT switchboard.console_passkey_used($1, $2)`, credentialID, credential)
}

// ConsoleAudit: switchboard.console_audit_add — records a console action that no screen
// function records itself (the screen functions audit their writes in their own transaction).
func (s *Store) ConsoleAudit(ctx context.Context, human, action, object string, detail []byte) error {
	if detail == nil {
		detail = []byte(`{}`)
	}
	return s.exec(ctx, `SELECT switchboard.console_audit_add($1, $2, $3, $4)`, human, action, object, detail)
}

// ConsoleHome: switchboard.console_home — {endpoints, queues}.
func (s *Store) ConsoleHome(ctx context.Context, human string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_home($1)`, human)
}

// ConsoleEndpoint: switchboard.console_endpoint — an endpoint and its grants, nil: not found.
func (s *Store) ConsoleEndpoint(ctx context.Context, human, endpoint string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_endpoint($1, $2)`, human, endpoint)
}

// ConsoleVend is what the vend form sends (the credential only as its sha256 and prefix).
type ConsoleVend struct {
	Agent            string
	CredentialHash   []byte
	CredentialPrefix string
	Queues, Verbs    []string
	WebhookMax       int32
	WebhookSources   []string
	WebhookQueues    []string
	LeaseTTL         *int32
}

// ConsoleEndpointVend: switchboard.console_endpoint_vend.
func (s *Store) ConsoleEndpointVend(ctx context.Context, human string, v ConsoleVend) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_endpoint_vend($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		human, v.Agent, v.CredentialHash, v.CredentialPrefix, v.Queues, v.Verbs, v.WebhookMax,
		v.WebhookSources, v.WebhookQueues, v.LeaseTTL)
}

// ConsoleEndpointRotate: switchboard.console_endpoint_rotate (nil: not found).
func (s *Store) ConsoleEndpointRotate(ctx context.Context, human, endpoint string, hash []byte, prefix string, grace time.Duration) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_endpoint_rotate($1, $2, $3, $4, $5)`, human, endpoint, hash, prefix, grace)
}

// ConsoleEndpointRevoke: switchboard.console_endpoint_revoke (nil: not found).
func (s *Store) ConsoleEndpointRevoke(ctx context.Context, human, endpoint string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_endpoint_revoke($1, $2)`, human, endpoint)
}

// ConsoleGrantRevoke: switchboard.console_grant_revoke (nil: not found).
func (s *Store) ConsoleGrantRevoke(ctx context.Context, human, grant string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_grant_revoke($1, $2)`, human, grant)
}

// ConsoleOAuthApprove: switchboard.console_oauth_approve — {grant_id} or {refused}.
func (s *Store) ConsoleOAuthApprove(ctx context.Context, human, endpoint string, clientHash []byte, clientName, redirectHost string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_oauth_approve($1, $2, $3, $4, $5)`,
		human, endpoint, clientHash, clientName, redirectHost)
}

// ConsoleFriends: switchboard.console_friends.
func (s *Store) ConsoleFriends(ctx context.Context, human string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_friends($1)`, human)
}

// ConsoleFriendRequest: switchboard.console_friend_request.
func (s *Store) ConsoleFriendRequest(ctx context.Context, human, to string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_friend_request($1, $2)`, human, to)
}

// ConsoleFriendDecide: switchboard.console_friend_decide (nil: not found).
func (s *Store) ConsoleFriendDecide(ctx context.Context, human, edge, state string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_friend_decide($1, $2, $3)`, human, edge, state)
}

// ConsoleAuditList: switchboard.console_audit_list.
func (s *Store) ConsoleAuditList(ctx context.Context, human string, limit int) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_audit_list($1, $2)`, human, limit)
}

// ConsolePasskeys: switchboard.console_passkey_list.
func (s *Store) ConsolePasskeys(ctx context.Context, human string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_passkey_list($1)`, human)
}

// ConsolePasskeyRemove: switchboard.console_passkey_remove.
func (s *Store) ConsolePasskeyRemove(ctx context.Context, human, passkey string) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_passkey_remove($1, $2)`, human, passkey)
}

// ConsoleVendForm: switchboard.console_vend_form.
func (s *Store) ConsoleVendForm(ctx context.Context) ([]byte, error) {
	return s.jsonCall(ctx, `SELECT switchboard.console_vend_form()`)
}

func (s *Store) exec(ctx context.Context, sql string, args ...any) error {
	if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
		return Classify(err)
	}
	return nil
}
