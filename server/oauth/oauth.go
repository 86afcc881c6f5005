// Package oauth makes Switchboard the OAuth 2.1 authorization server of its own endpoints, for
// hosted agents (claude.ai, ChatGPT and other MCP hosts) that cannot be given a bearer header.
// An access token is one more way to hold an endpoint's credential, with exactly its scope: it
// is bound to the endpoint whose MCP URL the client named as its resource (RFC 8707), and the
// MCP handler resolves it like an sbk_ credential (switchboard.credential_resolve).
//
// Built on github.com/ory/fosite (authorization code + PKCE S256, refresh rotation with reuse
// detection, RFC 7009 revocation), with its storage in PostgreSQL (storage.go,
// db/code/oauth.sql). This package adds what fosite leaves to its user: the protected resource
// metadata (RFC 9728), the server metadata (RFC 8414), Dynamic Client Registration (RFC 7591),
// Client ID Metadata Documents, the resource parameter and the consent page (consent.go).
package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/prometheus/client_golang/prometheus"

	"switchboard/server/store"
)

// Options configure the authorization server.
type Options struct {
	// BaseURL is the public URL (the issuer), no trailing slash.
	BaseURL string
	// AccessTTL is an access token's life (default 1h); RefreshTTL a refresh token's (30 days).
	AccessTTL, RefreshTTL time.Duration
	// AllowPrivateClients lets a client metadata document live on a private, loopback or
	// link-local address (tests; an intranet host).
	AllowPrivateClients bool
	// ExtraCAs are PEM certificates trusted, besides the system's, when fetching documents.
	ExtraCAs [][]byte
	// RegistrationsPerMinute bounds Dynamic Client Registration across the server (default 30).
	RegistrationsPerMinute int
	Log                    *slog.Logger
	Registerer             prometheus.Registerer
	// SignedIn finds the human signed in to the console on this request (server/console's
	// Session): the endpoint's owner approves on the consent page without an approval code.
	// Nil: approval codes only.
	SignedIn func(*http.Request) (store.ConsoleHuman, bool, error)
}

// Server is the authorization server and the resource metadata of every endpoint.
type Server struct {
	o       Options
	st      *store.Store
	clients *clients
	store   *storage
	fosite  fosite.OAuth2Provider
	log     *slog.Logger

	issued  *prometheus.CounterVec
	refused *prometheus.CounterVec
}

// New builds the authorization server over the store (whose pool runs as switchboard_runtime).
func New(st *store.Store, o Options) (*Server, error) {
	if o.AccessTTL <= 0 {
		o.AccessTTL = time.Hour
	}
	if o.RefreshTTL <= 0 {
		o.RefreshTTL = 30 * 24 * time.Hour
	}
	if o.RegistrationsPerMinute <= 0 {
		o.RegistrationsPerMinute = 30
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	cl, err := newClients(st, o)
	if err != nil {
		return nil, err
	}
	fs := &storage{st: st, clients: cl}
	cfg := &fosite.Config{
		AccessTokenLifespan:            o.AccessTTL,
		RefreshTokenLifespan:           o.RefreshTTL,
		AuthorizeCodeLifespan:          5 * time.Minute,
		EnforcePKCE:                    true,
		EnablePKCEPlainChallengeMethod: false,
		ScopeStrategy:                  fosite.ExactScopeStrategy,
		// The audience is the resource, granted by the consent page alone (consent.go).
		AudienceMatchingStrategy: func([]string, []string) error { return nil },
		RefreshTokenScopes:       []string{}, // every grant gets a refresh token
		TokenURL:                 o.BaseURL + "/token",
	}
	s := &Server{
		o: o, st: st, clients: cl, store: fs, log: o.Log,
		fosite: compose.Compose(cfg, fs, tokens{},
			compose.OAuth2AuthorizeExplicitFactory,
			compose.OAuth2RefreshTokenGrantFactory,
			compose.OAuth2TokenRevocationFactory,
			compose.OAuth2PKCEFactory),
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_oauth_tokens_issued_total", Help: "OAuth access tokens issued, by grant type.",
		}, []string{"grant_type"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_oauth_refused_total",
			Help: "OAuth requests refused (token, authorize, register, consent), by endpoint and reason (the OAuth error code).",
		}, []string{"at", "reason"}),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.issued, s.refused)
	}
	return s, nil
}

// Mount adds the OAuth routes to mux.
func (s *Server) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /.well-known/oauth-protected-resource", s.resourceMetadata)
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp/{slug}", s.resourceMetadata)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", s.serverMetadata)
	// Any other discovery document (OpenID Connect, path-suffixed server metadata): a JSON 404
	// that says where the real one is.
	mux.HandleFunc("/.well-known/", func(w http.ResponseWriter, _ *http.Request) {
		writeOAuthError(w, http.StatusNotFound, "not_found",
			"no such document (no OpenID Connect here): the OAuth 2.1 server metadata is at "+
				s.o.BaseURL+"/.well-known/oauth-authorization-server")
	})
	mux.HandleFunc("POST /register", s.register)
	mux.HandleFunc("GET /authorize", s.authorize)
	mux.HandleFunc("POST /authorize", s.authorize)
	mux.HandleFunc("POST /token", s.token)
	mux.HandleFunc("POST /revoke", s.revoke)
}

// MCPURL is an endpoint's MCP URL: the resource its tokens are for.
func (s *Server) MCPURL(slug string) string { return s.o.BaseURL + "/mcp/" + url.PathEscape(slug) }

// resourceMetadata is RFC 9728's document: per endpoint, or (root form) for the server.
func (s *Server) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	resource := s.o.BaseURL
	if slug := r.PathValue("slug"); slug != "" {
		ep, err := s.endpoint(r.Context(), slug)
		if err != nil {
			s.internal(w, "resource metadata", err)
			return
		}
		if ep == nil {
			writeOAuthError(w, http.StatusNotFound, "not_found", "no active endpoint at this path")
			return
		}
		resource = s.MCPURL(slug)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"resource":                 resource,
		"authorization_servers":    []string{s.o.BaseURL},
		"scopes_supported":         []string{scopeMCP},
		"bearer_methods_supported": []string{"header"},
		"resource_name":            "Switchboard endpoint",
	})
}

// serverMetadata is RFC 8414's document.
func (s *Server) serverMetadata(w http.ResponseWriter, _ *http.Request) {
	b := s.o.BaseURL
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                         b,
		"authorization_endpoint":                         b + "/authorize",
		"token_endpoint":                                 b + "/token",
		"registration_endpoint":                          b + "/register",
		"revocation_endpoint":                            b + "/revoke",
		"response_types_supported":                       []string{"code"},
		"response_modes_supported":                       []string{"query"},
		"grant_types_supported":                          []string{"authorization_code", "refresh_token"},
		"code_challenge_methods_supported":               []string{"S256"},
		"token_endpoint_auth_methods_supported":          []string{"none"},
		"revocation_endpoint_auth_methods_supported":     []string{"none"},
		"scopes_supported":                               allowedScopes,
		"client_id_metadata_document_supported":          true,
		"authorization_response_iss_parameter_supported": true, // consent.go, redirectBack
	})
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	status, reason := s.clients.register(w, r)
	if status >= 400 {
		s.refused.WithLabelValues("register", reason).Inc()
		s.log.Info("oauth registration refused", "status", status, "reason", reason)
		return
	}
	s.log.Info("oauth client registered")
}

// token is the token endpoint: code exchange and refresh, by fosite. A resource parameter, when
// sent, must be the one granted (RFC 8707: no token for another endpoint).
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	ctx := r.Context()
	ar, err := s.fosite.NewAccessRequest(ctx, r, &fosite.DefaultSession{})
	if err == nil {
		if res := ar.GetRequestForm().Get("resource"); res != "" && res != extra(ar, "resource") {
			err = fosite.ErrInvalidRequest.WithHint("The resource is not the one this grant is for.").
				WithWrap(errors.New("invalid_target"))
		}
	}
	var resp fosite.AccessResponder
	if err == nil {
		resp, err = s.fosite.NewAccessResponse(ctx, ar)
	}
	if err != nil {
		s.refuse("token", err)
		s.fosite.WriteAccessError(ctx, w, ar, err)
		return
	}
	grant := ar.GetGrantTypes()
	s.issued.WithLabelValues(strings.Join(grant, " ")).Inc()
	s.log.Info("oauth token issued", "grant_type", strings.Join(grant, " "), "endpoint", ar.GetSession().GetSubject())
	s.fosite.WriteAccessResponse(ctx, w, ar, resp)
}

// revoke is RFC 7009 revocation: of a refresh token, its family; of an access token, it.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	err := s.fosite.NewRevocationRequest(r.Context(), r)
	if err != nil {
		s.refuse("revoke", err)
	}
	s.fosite.WriteRevocationResponse(r.Context(), w, err)
}

// refuse counts and logs a refusal by its OAuth error code; never the request's values.
func (s *Server) refuse(at string, err error) {
	reason := "server_error"
	var rfc *fosite.RFC6749Error
	if errors.As(err, &rfc) {
		reason = rfc.ErrorField
		if errors.Is(err, fosite.ErrTokenExpired) {
			reason = "expired"
		}
	}
	if reason == "server_error" {
		s.log.Error("oauth request failed", "at", at, "err", logSafe(err))
	} else {
		s.log.Info("oauth request refused", "at", at, "reason", reason)
	}
	s.refused.WithLabelValues(at, reason).Inc()
}

// logSafe is what the log says of an unexpected failure: its classification and, for a
// database error, nothing of the statement.
func logSafe(err error) string {
	var rfc *fosite.RFC6749Error
	if errors.As(err, &rfc) && rfc.Unwrap() != nil {
		return rfc.ErrorField + ": " + store.Classify(rfc.Unwrap()).Code
	}
	return store.Classify(err).Code
}

func (s *Server) internal(w http.ResponseWriter, at string, err error) {
	s.log.Error("oauth request failed", "at", at, "err", store.Classify(err).Unwrap())
	writeOAuthError(w, http.StatusInternalServerError, "server_error", "internal error")
}

// endpointView is what the consent page shows of an endpoint.
type endpointView struct {
	ID      string   `json:"endpoint_id"`
	Slug    string   `json:"slug"`
	Agent   string   `json:"agent"`
	Human   string   `json:"human"`
	HumanID string   `json:"human_id"`
	Queues  []string `json:"queues"`
	Verbs   []string `json:"verbs"`
}

func (s *Server) endpoint(ctx context.Context, slug string) (*endpointView, error) {
	doc, err := s.st.OAuthEndpoint(ctx, slug)
	if err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, nil
	}
	var ep endpointView
	return &ep, json.Unmarshal(doc, &ep)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeOAuthError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

// writeFositeError answers a fosite error as OAuth JSON, with its hint but never its debug.
func writeFositeError(w http.ResponseWriter, err error) {
	var rfc *fosite.RFC6749Error
	if !errors.As(err, &rfc) {
		writeOAuthError(w, http.StatusInternalServerError, "server_error", "internal error")
		return
	}
	writeOAuthError(w, rfc.CodeField, rfc.ErrorField, rfc.GetDescription())
}

func isRefusal(err error) bool {
	c := store.Classify(err).Code
	return c == store.CodeForbidden || c == store.CodeNotFound
}
