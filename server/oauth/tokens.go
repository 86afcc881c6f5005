package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"time"

	"github.com/ory/fosite"
)

// Token prefixes: a leaked value says what it is (and the log-secret test looks for them).
const (
	prefixCode    = "sbac_" // authorization code
	prefixAccess  = "sbat_" // access token
	prefixRefresh = "sbrt_" // refresh token
)

// tokens is fosite's token strategy (oauth2.CoreStrategy): opaque random values whose fosite
// "signature" is the hex sha256 of the whole value. The database stores that hash, and an
// access token is resolved like an sbk_ credential, by the sha256 of the bearer value
// (switchboard.credential_resolve): no key to keep or rotate, nothing in the database that works
// as a token.
type tokens struct{}

func mint(prefix string) (token, signature string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	token = prefix + base64.RawURLEncoding.EncodeToString(b)
	return token, signatureOf(token), nil
}

func signatureOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// valid checks the expiry fosite put in the request's session for this kind of token.
func valid(r fosite.Requester, kind fosite.TokenType) error {
	if exp := r.GetSession().GetExpiresAt(kind); !exp.IsZero() && exp.Before(time.Now().UTC()) {
		return fosite.ErrTokenExpired.WithHintf("The %s expired.", kind)
	}
	return nil
}

func (tokens) AccessTokenSignature(_ context.Context, t string) string { return signatureOf(t) }
func (tokens) GenerateAccessToken(context.Context, fosite.Requester) (string, string, error) {
	return mint(prefixAccess)
}
func (tokens) ValidateAccessToken(_ context.Context, r fosite.Requester, _ string) error {
	return valid(r, fosite.AccessToken)
}

func (tokens) RefreshTokenSignature(_ context.Context, t string) string { return signatureOf(t) }
func (tokens) GenerateRefreshToken(context.Context, fosite.Requester) (string, string, error) {
	return mint(prefixRefresh)
}
func (tokens) ValidateRefreshToken(_ context.Context, r fosite.Requester, _ string) error {
	return valid(r, fosite.RefreshToken)
}

func (tokens) AuthorizeCodeSignature(_ context.Context, t string) string { return signatureOf(t) }
func (tokens) GenerateAuthorizeCode(context.Context, fosite.Requester) (string, string, error) {
	return mint(prefixCode)
}
func (tokens) ValidateAuthorizeCode(_ context.Context, r fosite.Requester, _ string) error {
	return valid(r, fosite.AuthorizeCode)
}
