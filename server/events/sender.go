// Package events sends MCP Events webhook deliveries (SEP-3415, docs/events.md): the signed
// verification challenge at subscribe time, and the outbox in PostgreSQL drained by every
// server (rows taken with FOR UPDATE SKIP LOCKED, so two servers never send one row at once).
// What to send and when to retry is decided in SQL (db/code/events.sql); this package makes
// the POSTs, over an HTTP client that only reaches globally routable addresses.
package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Limits of one outbound request.
const (
	connectTimeout  = 5 * time.Second
	requestTimeout  = 10 * time.Second
	maxResponseBody = 64 << 10
	// MaxBody is the SEP's bound on a delivery body.
	MaxBody = 256 << 10
)

// Categories of a failed delivery (the SEP's lastError and CallbackEndpointError data.reason).
// Never the receiver's body, headers or status line.
const (
	ConnectionRefused = "connection_refused"
	Timeout           = "timeout"
	TLSError          = "tls_error"
	HTTP4xx           = "http_4xx"
	HTTP5xx           = "http_5xx"
	ChallengeFailed   = "challenge_failed"
)

// CallbackError is a callback that failed verification or could not be reached.
type CallbackError struct{ Reason string }

func (e *CallbackError) Error() string { return "callback endpoint error: " + e.Reason }

// URLError is a callback URL refused before any request: not https (or http with the private
// setting), credentials, a fragment, or a literal address that is not globally routable.
type URLError struct{ Msg string }

func (e *URLError) Error() string { return e.Msg }

// Client posts to callback URLs.
type Client struct {
	http         *http.Client
	allowPrivate bool
}

// NewClient builds the client. allowPrivate (SWITCHBOARD_EVENTS_ALLOW_PRIVATE_CALLBACKS=1)
// admits loopback and private addresses and plain http, for tests and private deployments.
func NewClient(allowPrivate bool) *Client {
	c := &Client{allowPrivate: allowPrivate}
	dialer := &net.Dialer{Timeout: connectTimeout, Control: c.dialControl}
	c.http = &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			Proxy:                 nil, // the address checked is the one dialled
			DialContext:           dialer.DialContext,
			TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:   connectTimeout,
			ResponseHeaderTimeout: requestTimeout,
			MaxIdleConnsPerHost:   senders, // one receiver can have every sender
		},
		// No redirects: a redirect could name an internal address.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// CheckURL refuses a callback URL before anything is stored or sent.
func (c *Client) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return &URLError{"delivery.url is not an absolute URL"}
	}
	if u.Scheme != "https" && !(c.allowPrivate && u.Scheme == "http") {
		return &URLError{"delivery.url must use https"}
	}
	if u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") {
		return &URLError{"delivery.url must not carry credentials or a fragment"}
	}
	if len(raw) > 2048 {
		return &URLError{"delivery.url is too long"}
	}
	if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && !c.allowPrivate && !Global(ip) {
		return &URLError{"delivery.url names an address that is not globally routable"}
	}
	return nil
}

var errNotGlobal = errors.New("callback address is not globally routable")

// dialControl runs on the address actually dialled, after DNS resolution: neither a redirect
// (there are none) nor a rebinding name reaches a private address.
func (c *Client) dialControl(_, address string, _ syscall.RawConn) error {
	if c.allowPrivate {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !Global(ip) {
		return errNotGlobal
	}
	return nil
}

// Not globally routable, from the IANA IPv4 and IPv6 Special-Purpose Address Registries.
var special = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
		"::/128", "::1/128", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23",
		"2001:db8::/32", "2002::/16", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Global reports whether ip is globally routable (an IPv4-mapped address is judged as IPv4).
func Global(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	for _, p := range special {
		if p.Contains(ip) {
			return false
		}
	}
	return ip.IsValid()
}

// Sign is the Standard Webhooks webhook-signature value: one "v1,<base64 HMAC-SHA256>" per
// secret (two during a rotation's grace), space-separated.
func Sign(secrets []string, msgID string, ts int64, body []byte) string {
	var sigs []string
	for _, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil {
			continue // the database only holds checked secrets
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msgID + "." + strconv.FormatInt(ts, 10) + "."))
		m.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return strings.Join(sigs, " ")
}

// Post sends one signed body. It answers the status (0 when no response came) and, for a
// failure, its category.
func (c *Client) Post(ctx context.Context, rawURL, subID, msgID string, secrets []string, body []byte) (int, string, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return 0, ConnectionRefused, nil
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "switchboard-events")
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(secrets, msgID, ts, body))
	req.Header.Set("X-MCP-Subscription-Id", subID)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, category(err), nil
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return resp.StatusCode, "", got
	case resp.StatusCode >= 500:
		return resp.StatusCode, HTTP5xx, nil
	default: // 3xx (never followed) and 4xx
		return resp.StatusCode, HTTP4xx, nil
	}
}

func category(err error) string {
	var ne net.Error
	var tlsErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	switch {
	case errors.As(err, &tlsErr), errors.As(err, &recErr), strings.Contains(err.Error(), "tls:"):
		return TLSError
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return Timeout
	default:
		return ConnectionRefused
	}
}

// Verify sends the signed verification challenge and checks, in constant time, that the
// endpoint echoed it in a 2xx body.
func (c *Client) Verify(ctx context.Context, rawURL, subID, secret string) error {
	nonce := make([]byte, 24)
	_, _ = rand.Read(nonce)
	challenge := hex.EncodeToString(nonce)
	body, _ := json.Marshal(map[string]string{"type": "verification", "challenge": challenge})
	status, cat, got := c.Post(ctx, rawURL, subID, "msg_verification_"+hex.EncodeToString(nonce[:12]), []string{secret}, body)
	if status == 0 || cat != "" {
		return &CallbackError{Reason: cat}
	}
	var echo struct {
		Challenge string `json:"challenge"`
	}
	if json.Unmarshal(got, &echo) != nil || subtle.ConstantTimeCompare([]byte(echo.Challenge), []byte(challenge)) != 1 {
		return &CallbackError{Reason: ChallengeFailed}
	}
	return nil
}
