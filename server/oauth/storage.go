package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"time"

	"github.com/ory/fosite"

	"switchboard/server/store"
)

// storage is fosite's storage (client manager, codes, PKCE, access and refresh tokens,
// revocation), one store call per method (db/code/oauth.sql). Each row is keyed by the
// sha256 of its code or token (tokens.go) and hangs under a grant, so revoking the grant or the
// endpoint ends it in the database.
type storage struct {
	st      *store.Store
	clients *clients
}

// Kinds of rows in switchboard.oauth_tokens.
const (
	kindCode    = "code"
	kindPKCE    = "pkce"
	kindAccess  = "access"
	kindRefresh = "refresh"
)

// keptForm is what is kept of a request's form: what later steps compare against (the redirect
// URI, the PKCE challenge, the resource). Never a code, token, verifier or approval code.
var keptForm = []string{"redirect_uri", "code_challenge", "code_challenge_method", "resource", "state"}

// stored is a fosite request as kept in the database.
type stored struct {
	ID              string                 `json:"id"`
	RequestedAt     time.Time              `json:"requested_at"`
	ClientID        string                 `json:"client_id"`
	Scopes          []string               `json:"scopes"`
	GrantedScopes   []string               `json:"granted_scopes"`
	Audience        []string               `json:"audience"`
	GrantedAudience []string               `json:"granted_audience"`
	Form            url.Values             `json:"form"`
	Session         *fosite.DefaultSession `json:"session"`
}

// session is the fosite session of every request here: Subject is the endpoint id, Extra holds
// the grant id the consent recorded and the resource (the endpoint's MCP URL) it is for.
func newSession(endpointID, grantID, resource string) *fosite.DefaultSession {
	return &fosite.DefaultSession{Subject: endpointID,
		Extra: map[string]any{"grant_id": grantID, "resource": resource}}
}

func extra(r fosite.Requester, key string) string {
	if s, ok := r.GetSession().(*fosite.DefaultSession); ok {
		if g, ok := s.Extra[key].(string); ok {
			return g
		}
	}
	return ""
}

func grantOf(r fosite.Requester) string { return extra(r, "grant_id") }

func hashOf(signature string) []byte {
	b, err := hex.DecodeString(signature)
	if err != nil || len(b) != sha256.Size {
		// Not one of ours (a guessed value): a hash of it matches nothing either.
		sum := sha256.Sum256([]byte(signature))
		return sum[:]
	}
	return b
}

func (s *storage) put(ctx context.Context, kind, signature string, r fosite.Requester, life fosite.TokenType) error {
	form := url.Values{}
	for _, k := range keptForm {
		if v, ok := r.GetRequestForm()[k]; ok {
			form[k] = v
		}
	}
	sess, _ := r.GetSession().(*fosite.DefaultSession)
	doc, err := json.Marshal(stored{
		ID: r.GetID(), RequestedAt: r.GetRequestedAt(), ClientID: r.GetClient().GetID(),
		Scopes: r.GetRequestedScopes(), GrantedScopes: r.GetGrantedScopes(),
		Audience: r.GetRequestedAudience(), GrantedAudience: r.GetGrantedAudience(),
		Form: form, Session: sess,
	})
	if err != nil {
		return err
	}
	exp := r.GetSession().GetExpiresAt(life)
	if exp.IsZero() {
		exp = time.Now().Add(24 * time.Hour)
	}
	err = s.st.OAuthTokenPut(ctx, store.OAuthToken{Kind: kind, Hash: hashOf(signature), RequestID: r.GetID(),
		GrantID: grantOf(r), Expires: exp, Request: doc})
	if err != nil && isRefusal(err) {
		return fosite.ErrNotFound.WithHint("The grant or its endpoint was revoked.")
	}
	return err
}

// get loads a stored request into a fosite.Request.
func (s *storage) get(ctx context.Context, kind, signature string, _ fosite.Session) (*fosite.Request, bool, error) {
	doc, active, found, err := s.st.OAuthTokenGet(ctx, kind, hashOf(signature))
	if err != nil {
		return nil, false, err
	}
	if !found {
		return nil, false, fosite.ErrNotFound
	}
	var st stored
	if err := json.Unmarshal(doc, &st); err != nil {
		return nil, false, err
	}
	// A session of its own, as fosite's memory store returns: the one passed in may be another
	// request's already (the PKCE handler passes the code's), which must not be overwritten.
	sess := st.Session
	if sess == nil {
		sess = &fosite.DefaultSession{}
	}
	return &fosite.Request{
		ID: st.ID, RequestedAt: st.RequestedAt, Client: publicClient(st.ClientID, nil),
		RequestedScope: st.Scopes, GrantedScope: st.GrantedScopes,
		RequestedAudience: st.Audience, GrantedAudience: st.GrantedAudience,
		Form: st.Form, Session: sess,
	}, active, nil
}

func (s *storage) deactivate(ctx context.Context, kind, signature string) (bool, error) {
	return s.st.OAuthTokenDeactivate(ctx, kind, hashOf(signature))
}

func (s *storage) revokeFamily(ctx context.Context, kind, requestID string) error {
	return s.st.OAuthTokenRevokeFamily(ctx, kind, requestID)
}

// fosite.ClientManager

func (s *storage) GetClient(ctx context.Context, id string) (fosite.Client, error) {
	return s.clients.get(ctx, id)
}
func (s *storage) ClientAssertionJWTValid(context.Context, string) error { return nil }
func (s *storage) SetClientAssertionJWT(context.Context, string, time.Time) error {
	return nil // no JWT client authentication: public clients only
}

// oauth2.AuthorizeCodeStorage

func (s *storage) CreateAuthorizeCodeSession(ctx context.Context, code string, r fosite.Requester) error {
	return s.put(ctx, kindCode, code, r, fosite.AuthorizeCode)
}
func (s *storage) GetAuthorizeCodeSession(ctx context.Context, code string, sess fosite.Session) (fosite.Requester, error) {
	r, active, err := s.get(ctx, kindCode, code, sess)
	if err != nil {
		return nil, err
	}
	if !active {
		return r, fosite.ErrInvalidatedAuthorizeCode // fosite revokes what the code gave (RFC 6749 §4.1.2)
	}
	return r, nil
}
func (s *storage) InvalidateAuthorizeCodeSession(ctx context.Context, code string) error {
	ok, err := s.deactivate(ctx, kindCode, code)
	if err == nil && !ok { // a concurrent exchange of the same code won
		return fosite.ErrInvalidatedAuthorizeCode
	}
	return err
}

// pkce.PKCERequestStorage

func (s *storage) CreatePKCERequestSession(ctx context.Context, sig string, r fosite.Requester) error {
	return s.put(ctx, kindPKCE, sig, r, fosite.AuthorizeCode)
}
func (s *storage) GetPKCERequestSession(ctx context.Context, sig string, sess fosite.Session) (fosite.Requester, error) {
	r, _, err := s.get(ctx, kindPKCE, sig, sess)
	if err != nil {
		return nil, err
	}
	return r, nil
}
func (s *storage) DeletePKCERequestSession(ctx context.Context, sig string) error {
	return s.st.OAuthTokenDelete(ctx, kindPKCE, hashOf(sig))
}

// oauth2.AccessTokenStorage

func (s *storage) CreateAccessTokenSession(ctx context.Context, sig string, r fosite.Requester) error {
	return s.put(ctx, kindAccess, sig, r, fosite.AccessToken)
}
func (s *storage) GetAccessTokenSession(ctx context.Context, sig string, sess fosite.Session) (fosite.Requester, error) {
	r, active, err := s.get(ctx, kindAccess, sig, sess)
	if err != nil {
		return nil, err
	}
	if !active {
		return r, fosite.ErrInactiveToken
	}
	return r, nil
}
func (s *storage) DeleteAccessTokenSession(ctx context.Context, sig string) error {
	return s.st.OAuthTokenDelete(ctx, kindAccess, hashOf(sig))
}

// oauth2.RefreshTokenStorage

func (s *storage) CreateRefreshTokenSession(ctx context.Context, sig, _ string, r fosite.Requester) error {
	return s.put(ctx, kindRefresh, sig, r, fosite.RefreshToken)
}
func (s *storage) GetRefreshTokenSession(ctx context.Context, sig string, sess fosite.Session) (fosite.Requester, error) {
	r, active, err := s.get(ctx, kindRefresh, sig, sess)
	if err != nil {
		return nil, err
	}
	if !active {
		return r, fosite.ErrInactiveToken // reuse: fosite revokes the whole family
	}
	return r, nil
}
func (s *storage) DeleteRefreshTokenSession(ctx context.Context, sig string) error {
	return s.st.OAuthTokenDelete(ctx, kindRefresh, hashOf(sig))
}

// RotateRefreshToken retires the refresh token being used (kept, inactive, so a second use is
// seen as reuse) and the family's access tokens. The conditional update lets only one of two
// concurrent refreshes with the same token through.
func (s *storage) RotateRefreshToken(ctx context.Context, requestID, sig string) error {
	ok, err := s.deactivate(ctx, kindRefresh, sig)
	if err != nil {
		return err
	}
	if !ok {
		return fosite.ErrInactiveToken
	}
	return s.revokeFamily(ctx, kindAccess, requestID)
}

// oauth2.TokenRevocationStorage: a family is one authorization and every refresh of it.

func (s *storage) RevokeRefreshToken(ctx context.Context, requestID string) error {
	return s.revokeFamily(ctx, kindRefresh, requestID)
}
func (s *storage) RevokeAccessToken(ctx context.Context, requestID string) error {
	return s.revokeFamily(ctx, kindAccess, requestID)
}
