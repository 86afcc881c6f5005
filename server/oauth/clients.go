package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ory/fosite"

	"switchboard/server/store"
)

// Bounds of a Client ID Metadata Document fetch, and how long a fetched document is trusted.
const (
	maxDocument   = 64 << 10
	fetchTimeout  = 5 * time.Second
	documentCache = time.Hour
	// An unused dynamic registration is forgotten after this (the purge deletes it).
	registrationTTL = 24 * time.Hour
	// What a client may ask for: "mcp" is the endpoint's whole scope; offline_access is
	// accepted because many clients ask for it to get a refresh token (they get one anyway).
	scopeMCP = "mcp"
)

var allowedScopes = []string{scopeMCP, "offline_access"}

// publicClient is every client here: public (PKCE authenticates the exchange), code and
// refresh grants only.
func publicClient(id string, redirects []string) *fosite.DefaultClient {
	return &fosite.DefaultClient{
		ID: id, RedirectURIs: redirects, Public: true,
		GrantTypes:    []string{"authorization_code", "refresh_token"},
		ResponseTypes: []string{"code"},
		Scopes:        allowedScopes,
	}
}

// client is a public client and the name the consent page shows.
type client struct {
	*fosite.DefaultClient
	Name string
}

// clients finds clients: dynamic registrations in the database, and Client ID Metadata
// Documents fetched from their https client_id and cached there.
type clients struct {
	st           *store.Store
	http         *http.Client
	allowPrivate bool
	perMinute    int
}

func newClients(st *store.Store, o Options) (*clients, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	for _, pem := range o.ExtraCAs {
		if !roots.AppendCertsFromPEM(pem) {
			return nil, errors.New("oauth: no certificate in the extra CA file")
		}
	}
	c := &clients{st: st, allowPrivate: o.AllowPrivateClients, perMinute: o.RegistrationsPerMinute}
	dialer := &net.Dialer{Timeout: fetchTimeout, Control: c.dialControl}
	c.http = &http.Client{
		Timeout: fetchTimeout,
		Transport: &http.Transport{
			Proxy:               nil, // the address checked is the one dialled
			DialContext:         dialer.DialContext,
			TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: fetchTimeout,
			MaxIdleConns:        4,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "https" || len(via) >= 3 {
				return errors.New("redirect refused")
			}
			return nil // the dial of the new address is checked like the first
		},
	}
	return c, nil
}

// dialControl refuses private, loopback, link-local and other non-public addresses, after DNS
// resolution (so neither a redirect nor a rebinding name gets there), unless allowed.
func (c *clients) dialControl(_, address string, _ syscall.RawConn) error {
	if c.allowPrivate {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || !publicIP(ip) {
		return errPrivateAddress
	}
	return nil
}

var errPrivateAddress = errors.New("client metadata document on a non-public address")

func publicIP(ip net.IP) bool {
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() ||
		// 100.64.0.0/10 (carrier-grade NAT) is not public either.
		(ip.To4() != nil && ip.To4()[0] == 100 && ip.To4()[1]&0xc0 == 64))
}

func clientHash(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	return sum[:]
}

// isDocumentID: a client_id that is an https URL with a path names its metadata document.
func isDocumentID(id string) bool {
	u, err := url.Parse(id)
	return err == nil && u.Scheme == "https" && u.Host != "" && u.Path != "" && u.Path != "/" &&
		u.User == nil && u.Fragment == ""
}

func (c *clients) get(ctx context.Context, id string) (*client, error) {
	if cl, err := c.lookup(ctx, id); cl != nil || err != nil {
		return cl, err
	}
	if !isDocumentID(id) {
		return nil, fosite.ErrInvalidClient.WithHint("Unknown client: register it, or use an https client metadata document URL as client_id.")
	}
	return c.fetch(ctx, id)
}

func (c *clients) lookup(ctx context.Context, id string) (*client, error) {
	doc, err := c.st.OAuthClientGet(ctx, clientHash(id))
	if err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, nil
	}
	var row struct {
		Name      string   `json:"client_name"`
		Redirects []string `json:"redirect_uris"`
	}
	if err := json.Unmarshal(doc, &row); err != nil {
		return nil, err
	}
	return &client{DefaultClient: publicClient(id, row.Redirects), Name: row.Name}, nil
}

// metadata is the part of RFC 7591 client metadata (and of a Client ID Metadata Document) that
// matters here.
type metadata struct {
	ClientID                string   `json:"client_id,omitempty"`
	ClientName              string   `json:"client_name,omitempty"`
	ClientURI               string   `json:"client_uri,omitempty"`
	RedirectURIs            []string `json:"redirect_uris"`
	GrantTypes              []string `json:"grant_types,omitempty"`
	ResponseTypes           []string `json:"response_types,omitempty"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method,omitempty"`
	Scope                   string   `json:"scope,omitempty"`
}

// check validates client metadata: redirect URIs absolute without fragment (https, or http on
// a loopback host per RFC 8252), a public client, and only the code and refresh grants.
func (m *metadata) check() error {
	if len(m.RedirectURIs) == 0 || len(m.RedirectURIs) > 16 {
		return errors.New("redirect_uris must list 1 to 16 URIs")
	}
	for _, r := range m.RedirectURIs {
		u, err := url.Parse(r)
		if err != nil || !u.IsAbs() || u.Fragment != "" || len(r) > 2000 {
			return fmt.Errorf("redirect URI %q is not an absolute URI without fragment", r)
		}
		if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
			return fmt.Errorf("redirect URI %q: http only on a loopback host", r)
		}
		if u.Scheme == "javascript" || u.Scheme == "data" || u.Scheme == "file" {
			return fmt.Errorf("redirect URI %q: scheme not allowed", r)
		}
	}
	if m.TokenEndpointAuthMethod != "" && m.TokenEndpointAuthMethod != "none" {
		return errors.New(`token_endpoint_auth_method must be "none": public clients with PKCE only`)
	}
	for _, g := range m.GrantTypes {
		if g != "authorization_code" && g != "refresh_token" {
			return fmt.Errorf("grant type %q is not supported", g)
		}
	}
	for _, rt := range m.ResponseTypes {
		if rt != "code" {
			return fmt.Errorf("response type %q is not supported", rt)
		}
	}
	if len(m.ClientName) > 200 {
		return errors.New("client_name is longer than 200 characters")
	}
	return nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func (m *metadata) name(fallback string) string {
	n := strings.TrimSpace(m.ClientName)
	if n == "" {
		return fallback
	}
	return n
}

// fetch gets a Client ID Metadata Document (bounded in size and time), checks it and caches it.
func (c *clients) fetch(ctx context.Context, id string) (*client, error) {
	refused := func(why string) error {
		return fosite.ErrInvalidClient.WithHint("The client metadata document was refused: " + why + ".")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, refused("bad URL")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, errPrivateAddress) {
			return nil, refused("it is on a private, loopback or link-local address")
		}
		return nil, refused("it could not be fetched")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, refused(fmt.Sprintf("HTTP %d", resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocument+1))
	if err != nil || len(body) > maxDocument {
		return nil, refused("it is larger than 64 KiB or could not be read")
	}
	var m metadata
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, refused("it is not a JSON object")
	}
	if m.ClientID != id {
		return nil, refused("its client_id is not its URL")
	}
	if err := m.check(); err != nil {
		return nil, refused(err.Error())
	}
	u, _ := url.Parse(id)
	name := m.name(u.Host)
	if err := c.st.OAuthClientCache(ctx, store.OAuthClient{IDHash: clientHash(id), Name: name,
		RedirectURIs: m.RedirectURIs, Document: body, TTL: documentCache}); err != nil {
		return nil, err
	}
	return &client{DefaultClient: publicClient(id, m.RedirectURIs), Name: name}, nil
}

// register is Dynamic Client Registration (RFC 7591), public clients only.
func (c *clients) register(w http.ResponseWriter, r *http.Request) (status int, reason string) {
	var m metadata
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxDocument))
	if err := dec.Decode(&m); err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", "the body is not client metadata JSON")
		return http.StatusBadRequest, "invalid_client_metadata"
	}
	if err := m.check(); err != nil {
		code := "invalid_client_metadata"
		if strings.Contains(err.Error(), "redirect") {
			code = "invalid_redirect_uri"
		}
		writeOAuthError(w, http.StatusBadRequest, code, err.Error())
		return http.StatusBadRequest, code
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return http.StatusInternalServerError, "internal"
	}
	id := "sbc_" + base64.RawURLEncoding.EncodeToString(b)
	name := m.name("unnamed client")
	m.ClientID, m.TokenEndpointAuthMethod = id, "none"
	if len(m.GrantTypes) == 0 {
		m.GrantTypes = []string{"authorization_code", "refresh_token"}
	}
	m.ResponseTypes = []string{"code"}
	doc, _ := json.Marshal(m)
	ok, err := c.st.OAuthClientRegister(r.Context(), store.OAuthClient{IDHash: clientHash(id), Name: name,
		RedirectURIs: m.RedirectURIs, Document: doc, TTL: registrationTTL}, c.perMinute)
	if err != nil {
		writeOAuthError(w, http.StatusInternalServerError, "server_error", "registration failed")
		return http.StatusInternalServerError, "internal: " + store.Classify(err).Code
	}
	if !ok {
		w.Header().Set("Retry-After", "60")
		writeOAuthError(w, http.StatusTooManyRequests, "rate_limited", "too many client registrations; retry in a minute")
		return http.StatusTooManyRequests, "rate_limited"
	}
	out := map[string]any{
		"client_id": id, "client_id_issued_at": time.Now().Unix(), "client_name": name,
		"redirect_uris": m.RedirectURIs, "grant_types": m.GrantTypes, "response_types": m.ResponseTypes,
		"token_endpoint_auth_method": "none",
	}
	if m.Scope != "" {
		out["scope"] = m.Scope
	}
	writeJSON(w, http.StatusCreated, out)
	return http.StatusCreated, ""
}

// redirectAllowed: the registered redirect URIs of a client, for the consent page's checks.
func (cl *client) redirectAllowed(u string) bool { return slices.Contains(cl.RedirectURIs, u) }
