package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"switchboard/server/store"
)

// Sessions live in PostgreSQL (switchboard.console_sessions, through
// switchboard.console_session_*): the cookie holds 32 random bytes, the table their sha256.
// The cookie is __Host- prefixed (Secure, Path=/, no Domain: only this origin, only over a
// secure transport), HttpOnly and SameSite=Lax. Secure is set on plain http too: browsers
// take a Secure cookie from http://localhost, a secure context, and the console names
// localhost for a loopback address (PublicBase); on any other plain-http host the browser
// drops the cookie and sign-in cannot finish: serve the console behind HTTPS.
const (
	sessionCookie   = "__Host-sb_session"
	ceremonyCookie  = "__Host-sb_ceremony"
	ceremonyTTL     = 5 * time.Minute
	sessionTokenLen = 32
)

type humanKey struct{}

// HumanFrom is the signed-in human the auth middleware put in the request's context.
func HumanFrom(ctx context.Context) (store.ConsoleHuman, bool) {
	h, ok := ctx.Value(humanKey{}).(store.ConsoleHuman)
	return h, ok
}

// WithHuman is ctx carrying h (for tests of handlers).
func WithHuman(ctx context.Context, h store.ConsoleHuman) context.Context {
	return context.WithValue(ctx, humanKey{}, h)
}

func newToken() string {
	b := make([]byte, sessionTokenLen)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashToken(t string) []byte {
	s := sha256.Sum256([]byte(t))
	return s[:]
}

func setCookie(w http.ResponseWriter, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
}

// Session finds the signed-in human of a request by its session cookie (ok false: none, or the
// session ended or expired). The consent page (server/oauth) uses it too.
func (c *Console) Session(r *http.Request) (store.ConsoleHuman, bool, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return store.ConsoleHuman{}, false, nil
	}
	return c.st.ConsoleSession(r.Context(), hashToken(ck.Value))
}

// startSession signs h in: a new session row and its cookie.
func (c *Console) startSession(w http.ResponseWriter, r *http.Request, human string) error {
	tok := newToken()
	if err := c.st.ConsoleSessionStart(r.Context(), human, hashToken(tok), c.o.SessionIdle, c.o.SessionMax); err != nil {
		return err
	}
	setCookie(w, sessionCookie, tok, int(c.o.SessionMax/time.Second))
	return nil
}

// screen registers a signed-in page: without a live session a GET is sent to the sign-in page
// and anything else refused; with one, the human is in the context and passed to h.
func (c *Console) screen(pattern string, h func(http.ResponseWriter, *http.Request, store.ConsoleHuman)) {
	c.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		human, ok, err := c.Session(r)
		if err != nil {
			c.failed(w, r, err)
			return
		}
		if !ok {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
				return
			}
			c.render(w, r, "signin", http.StatusUnauthorized, view{Error: "Your session ended: sign in again."})
			return
		}
		h(w, r.WithContext(WithHuman(r.Context(), human)), human)
	})
}

// signout ends the session on the server and clears the cookie.
func (c *Console) signout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(sessionCookie); err == nil && ck.Value != "" && len(ck.Value) <= 100 {
		if err := c.st.ConsoleSessionEnd(r.Context(), hashToken(ck.Value)); err != nil {
			c.failed(w, r, err)
			return
		}
	}
	setCookie(w, sessionCookie, "", -1)
	http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
}

// limiter bounds failed sign-ins (and passkey registrations) per client address: a burst,
// then one every interval. Behind a proxy every client shares the proxy's address, which
// makes the limit global: still a limit.
type limiter struct {
	mu    sync.Mutex
	burst int
	every time.Duration
	m     map[string]*rate.Limiter
}

func newLimiter(burst int, every time.Duration) *limiter {
	return &limiter{burst: burst, every: every, m: map[string]*rate.Limiter{}}
}

func (l *limiter) get(r *http.Request) *rate.Limiter {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.m[host]
	if lim == nil {
		if len(l.m) > 10000 { // forget everyone rather than grow without bound
			l.m = map[string]*rate.Limiter{}
		}
		lim = rate.NewLimiter(rate.Every(l.every), l.burst)
		l.m[host] = lim
	}
	return lim
}

// blocked reports whether this client's failures used up its allowance.
func (l *limiter) blocked(r *http.Request) bool { return l.get(r).Tokens() < 1 }

// failed counts one failure.
func (l *limiter) failed(r *http.Request) { l.get(r).Allow() }
