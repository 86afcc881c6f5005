// Package console is Switchboard's human console: server-rendered pages under /console/ where a
// human signs in with a passkey and runs their own agents, endpoints, friendships (and, on
// other screens, queues and webhooks). Pages are html/template, embedded, with no script but
// the passkey ceremony's (assets/passkey.js), a strict CSP, and a layout that reads on a phone.
//
// The rule of the house: every screen reads and writes through a SQL function that takes the
// signed-in human (db/code/console*.sql, through server/store) and answers only that human's
// rows, or everyone's for an operator human. A nil answer is not found: another human's id, a
// malformed id and an unknown id all get the same page (notFound), byte for byte.
//
// Adding a screen:
//
//  1. SQL: a function switchboard.console_<thing>(p_human uuid, ...) in a db/code file of its
//     concern (added to db/code/install.sql), answering jsonb or NULL for not found, writes
//     audited with switchboard.console_audit_add; list it in db/code/grants.sql.
//  2. store: a method in server/store (the one SQL boundary) that calls it.
//  3. here: a handler func(w, r, h store.ConsoleHuman) in a screen_<thing>.go, registered in
//     routes with c.screen("GET /console/<thing>", ...) (signed-in only; the human comes from
//     the session), and a template templates/<thing>.html defining "title" and "content"
//     (the layout is templates/layout.html), rendered with c.render(w, r, "<thing>", status, v).
//     Bad input: render the form again with v.Error set and write nothing; an id the function
//     answers nil for: c.notFound(w, r). A state-changing request is a POST (cross-origin ones
//     are refused for every route by http.CrossOriginProtection).
//  4. nav: add the screen to navItems if it belongs in the top bar.
package console

import (
	"bytes"
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"

	"switchboard/server/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Options configure the console.
type Options struct {
	Store *store.Store
	// BaseURL is the server's public URL (no trailing slash). The console's own (PublicBase)
	// names localhost instead of a loopback address: WebAuthn needs a host name.
	BaseURL string
	Log     *slog.Logger
	// SessionIdle and SessionMax bound a session: idle time (default 1h) and absolute life
	// (default 12h).
	SessionIdle, SessionMax time.Duration
	// SignInBurst failed sign-ins per client address are let through, then one more every
	// SignInEvery (defaults 5 and 12s).
	SignInBurst int
	SignInEvery time.Duration
}

// Console is the console's handler and its parts.
type Console struct {
	o       Options
	st      *store.Store
	log     *slog.Logger
	base    *url.URL // PublicBase(BaseURL), parsed
	wa      *webauthn.WebAuthn
	pages   map[string]*template.Template
	mux     *http.ServeMux
	handler http.Handler
	limits  *limiter

	assetOnce sync.Once
}

// New builds the console.
func New(o Options) (*Console, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = time.Hour
	}
	if o.SessionMax <= 0 {
		o.SessionMax = 12 * time.Hour
	}
	if o.SignInBurst <= 0 {
		o.SignInBurst = 5
	}
	if o.SignInEvery <= 0 {
		o.SignInEvery = 12 * time.Second
	}
	base, err := url.Parse(PublicBase(o.BaseURL))
	if err != nil {
		return nil, err
	}
	wa, err := webauthn.New(&webauthn.Config{
		RPID:          base.Hostname(),
		RPDisplayName: "Switchboard",
		RPOrigins:     []string{base.Scheme + "://" + base.Host},
	})
	if err != nil {
		return nil, err
	}
	c := &Console{o: o, st: o.Store, log: o.Log, base: base, wa: wa, mux: http.NewServeMux(),
		limits: newLimiter(o.SignInBurst, o.SignInEvery)}
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	c.routes()
	// Every state-changing request from another origin is refused (Sec-Fetch-Site, then Origin
	// against Host): the session cookie is SameSite=Lax as well, but Lax lets a top-level
	// cross-site GET through, and a POST from a sibling subdomain is same-site.
	c.handler = http.NewCrossOriginProtection().Handler(c.mux)
	return c, nil
}

// Mount adds the console to the server's mux, under /console/.
func (c *Console) Mount(mux *http.ServeMux) {
	mux.Handle("/console/", c.handler)
	mux.Handle("GET /console", http.RedirectHandler("/console/", http.StatusSeeOther))
}

// Handler is the console's handler (all of /console/).
func (c *Console) Handler() http.Handler { return c.handler }

// PublicBase is the console's base URL: base, with a loopback address (127.0.0.1, [::1]) named
// localhost. A passkey belongs to a host name (its relying party id), never an IP address, and
// browsers treat http://localhost as a secure context, so the console works on a developer's
// plain-http server as it does behind HTTPS.
func PublicBase(base string) string {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || u.Host == "" {
		return strings.TrimRight(base, "/")
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() {
		if p := u.Port(); p != "" {
			u.Host = "localhost:" + p
		} else {
			u.Host = "localhost"
		}
	}
	return u.String()
}

// InviteURL is the link an invite token opens.
func InviteURL(base, token string) string {
	return PublicBase(base) + "/console/invite/" + token
}

// routes registers every page. Public ones: sign-in, invites, assets. The rest are screens:
// signed-in only.
func (c *Console) routes() {
	m := c.mux
	sub, _ := fs.Sub(assetFS, "assets")
	m.Handle("GET /console/assets/", http.StripPrefix("/console/assets/", http.FileServerFS(sub)))
	m.HandleFunc("GET /console/signin", c.signinPage)
	m.HandleFunc("POST /console/signin/begin", c.signinBegin)
	m.HandleFunc("POST /console/signin/finish", c.signinFinish)
	m.HandleFunc("GET /console/invite/{token}", c.invitePage)
	m.HandleFunc("POST /console/invite/{token}/begin", c.inviteBegin)
	m.HandleFunc("POST /console/invite/{token}/finish", c.inviteFinish)
	m.HandleFunc("POST /console/signout", c.signout)

	c.screen("GET /console/{$}", c.home)
	c.screen("GET /console/vend", c.vendForm)
	c.screen("POST /console/vend", c.vend)
	c.screen("GET /console/endpoints/{id}", c.endpoint)
	c.screen("GET /console/endpoints/{id}/rotate", c.rotateConfirm)
	c.screen("POST /console/endpoints/{id}/rotate", c.rotate)
	c.screen("GET /console/endpoints/{id}/revoke", c.revokeConfirm)
	c.screen("POST /console/endpoints/{id}/revoke", c.revoke)
	c.screen("POST /console/grants/{id}/revoke", c.grantRevoke)
	c.screen("GET /console/friends", c.friends)
	c.screen("POST /console/friends", c.friendRequest)
	c.screen("POST /console/friends/{id}/{decision}", c.friendDecide)
	c.screen("GET /console/audit", c.audit)
	c.screen("GET /console/passkeys", c.passkeys)
	c.screen("POST /console/passkeys/{id}/remove", c.passkeyRemove)
	c.queueRoutes()
	// Anything else under /console/: the not-found page (signed in), or the sign-in page.
	c.screen("/console/", func(w http.ResponseWriter, r *http.Request, _ store.ConsoleHuman) { c.notFound(w, r) })
}

// navItems are the top bar's links.
var navItems = []struct{ Path, Label string }{
	{"/console/", "Home"},
	{"/console/vend", "Vend"},
	{"/console/queues", "Queues"},
	{"/console/deadletters", "Dead letters"},
	{"/console/webhooks", "Webhooks"},
	{"/console/friends", "Friends"},
	{"/console/audit", "Audit"},
	{"/console/passkeys", "Passkeys"},
}

// view is what every template gets: the signed-in human (nil on public pages), the page's
// own data, and an inline error for a form.
type view struct {
	Human *store.ConsoleHuman
	Path  string
	Nav   []struct{ Path, Label string }
	Error string
	Data  any
}

func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

var funcs = template.FuncMap{
	"join": strings.Join,
	"age": func(seconds float64) string {
		return (time.Duration(seconds) * time.Second).String()
	},
}

// csp: the console's own stylesheet and (sign-in pages only) its own script, forms posting
// here, nothing else.
const csp = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// render writes a page: the named template in the layout, with status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, status int, v view) {
	t := c.pages[name]
	if t == nil {
		c.log.Error("console: no such template", "name", name)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	if v.Human == nil {
		if h, ok := HumanFrom(r.Context()); ok {
			v.Human = &h
		}
	}
	if v.Human != nil {
		v.Nav = navItems
	}
	v.Path = r.URL.Path
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		c.log.Error("console: render failed", "name", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// notFound is the one not-found page: for an unknown id, a malformed one and another human's
// alike. It shows nothing of the request (not even its path), so the three are byte-identical.
func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	r2 := r.Clone(r.Context())
	r2.URL.Path = ""
	c.render(w, r2, "notfound", http.StatusNotFound, view{})
}

// failed answers an unexpected store error: logged (the cause, never a secret: the store's
// errors carry none), and a plain 500 or 503 page.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, err error) {
	e := store.Classify(err)
	c.log.Error("console: store call failed", "route", r.Pattern, "err", e.Unwrap())
	status := http.StatusInternalServerError
	if store.Unavailable(err) {
		status = http.StatusServiceUnavailable
	}
	c.render(w, r, "error", status, view{})
}

// Audit records a console action that no screen function records itself (see
// switchboard.console_audit_add): who, what (e.g. "session.start"), on which object.
func (c *Console) Audit(ctx context.Context, h store.ConsoleHuman, action, object string) {
	if err := c.st.ConsoleAudit(ctx, h.ID, action, object, nil); err != nil {
		c.log.Warn("console: audit write failed", "action", action, "err", store.Classify(err).Unwrap())
	}
}
