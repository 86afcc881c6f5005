package oauth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/ory/fosite"

	"switchboard/server/store"
)

// The consent page is server-rendered, works without JavaScript, and is easy to drive from a
// script: one <form method="post"> with a text input approval_code and submit buttons named
// decision (approve, deny). The original authorization request rides along in hidden fields;
// fosite validates it again on the POST.

const csrfCookie = "sb_oauth_csrf"

// pageCSS is the page's only style; the CSP allows exactly it, by hash.
const pageCSS = `body{font:16px/1.5 system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2430}` +
	`main{max-width:34rem;margin:3rem auto;background:#fff;padding:2rem 2.25rem;border-radius:10px;box-shadow:0 1px 4px #0002}` +
	`h1{font-size:1.35rem;margin:0 0 1rem}p{margin:.5rem 0}dl{display:grid;grid-template-columns:8.5rem 1fr;gap:.35rem 1rem;margin:1.25rem 0}` +
	`dt{color:#5a6473}dd{margin:0;overflow-wrap:anywhere}code{font:14px ui-monospace,monospace;background:#eef0f3;padding:.05rem .3rem;border-radius:4px}` +
	`label{display:block;font-weight:600;margin-top:1.25rem}input[type=text]{width:100%;box-sizing:border-box;font:18px ui-monospace,monospace;padding:.55rem .7rem;margin:.35rem 0;border:1px solid #9aa3af;border-radius:6px}` +
	`.hint{color:#5a6473;font-size:.9rem}.error{background:#fdecec;color:#8a1c1c;padding:.6rem .8rem;border-radius:6px}` +
	`.buttons{display:flex;gap:.75rem;margin-top:1.25rem}button{font:inherit;padding:.55rem 1.4rem;border-radius:6px;border:1px solid #1f5fbf;background:#1f5fbf;color:#fff;cursor:pointer}` +
	`button.secondary{background:#fff;color:#1f5fbf}`

var styleHash = func() string {
	sum := sha256.Sum256([]byte(pageCSS))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

// pageCSP allows the page's one style and a form that posts here. form-action also names the
// client's redirect origin: browsers apply it to the redirect that answers the form.
func pageCSP(redirect *url.URL) string {
	target := redirect.Scheme + ":"
	if redirect.Host != "" {
		target = redirect.Scheme + "://" + redirect.Host
	}
	return "default-src 'none'; style-src " + styleHash + "; base-uri 'none'; frame-ancestors 'none'; " +
		"form-action 'self' " + target
}

var page = template.Must(template.New("consent").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Connect {{.Client}} to Switchboard</title><style>` + pageCSS + `</style></head>
<body><main>
<h1>Connect {{.Client}} to a Switchboard endpoint</h1>
<p><strong>{{.Client}}</strong> asks to act as the agent <strong>{{.Agent}}</strong> of {{.Human}}, with this endpoint's scope and nothing more.</p>
<dl>
<dt>Client</dt><dd>{{.Client}}</dd>
<dt>Returns you to</dt><dd><code>{{.RedirectHost}}</code></dd>
<dt>Endpoint</dt><dd><code>{{.MCPURL}}</code></dd>
<dt>Queues</dt><dd>{{range $i, $q := .Queues}}{{if $i}}, {{end}}<code>{{$q}}</code>{{end}}</dd>
<dt>Verbs</dt><dd>{{range $i, $v := .Verbs}}{{if $i}}, {{end}}{{$v}}{{end}}</dd>
</dl>
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="{{.Action}}">
{{range .Hidden}}<input type="hidden" name="{{.Name}}" value="{{.Value}}">
{{end}}{{if .Owner}}<p>You are signed in as <strong>{{.SignedIn}}</strong>{{if .Operator}} (operator){{end}}: approve or deny directly.</p>
{{else}}{{if .SignedIn}}<p class="hint">You are signed in as {{.SignedIn}}, who does not own this endpoint: an approval code is needed.</p>
{{end}}<label for="approval_code">Approval code</label>
<input id="approval_code" name="approval_code" type="text" autocomplete="one-time-code" spellcheck="false" autofocus>
<p class="hint">The operator gets one with <code>switchboard endpoint connect {{.Slug}}</code>. It works once. The endpoint's owner, signed in to the <a href="/console/">console</a>, needs none.</p>{{end}}
<div class="buttons"><button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button></div>
</form>
</main></body></html>
`))

// noState stands in for the state a client did not send.
const noState = "switchboard-no-state"

// redirectBack finishes fosite's redirect back to the client, the authorization response, on
// success and on error alike (fosite 0.49 has no hook for either): it adds iss, the issuer, so
// that a client of several authorization servers can tell which one answered (RFC 9207), and
// takes the stand-in state out again. The consent page itself has no Location and is untouched.
type redirectBack struct {
	http.ResponseWriter
	issuer string
}

func (w *redirectBack) WriteHeader(code int) {
	if loc, err := url.Parse(w.Header().Get("Location")); err == nil && *loc != (url.URL{}) {
		for _, part := range []*string{&loc.RawQuery, &loc.Fragment} {
			q, err := url.ParseQuery(*part)
			if err != nil || (!q.Has("code") && !q.Has("error")) {
				continue // the redirect URI's own query, when the response is in the fragment
			}
			if q.Get("state") == noState {
				q.Del("state")
			}
			q.Set("iss", w.issuer)
			*part = q.Encode()
		}
		w.Header().Set("Location", loc.String())
	}
	w.ResponseWriter.WriteHeader(code)
}

type hidden struct{ Name, Value string }

type consentPage struct {
	Client, RedirectHost, MCPURL, Agent, Human, Slug, Action, Error string
	// SignedIn names the human signed in to the console; Owner: they own the endpoint (or are an
	// operator) and approve without a code.
	SignedIn        string
	Owner, Operator bool
	Queues, Verbs   []string
	Hidden          []hidden
	csp             string
}

// Form fields of the page itself, never carried over as part of the authorization request.
var pageFields = []string{"approval_code", "decision", "csrf"}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 32<<10)
	ctx := r.Context()
	// A client metadata document is fetched first, so a refusal says why (fosite's says only
	// that the client does not exist).
	if id := r.FormValue("client_id"); isDocumentID(id) {
		if _, err := s.clients.get(ctx, id); err != nil {
			s.refuse("authorize", err)
			writeFositeError(w, err)
			return
		}
	}
	// state is optional (OAuth 2.1: PKCE protects the redirect; the TypeScript SDK sends none)
	// but fosite demands one of 8 characters or more: a request without one gets a stand-in,
	// which the redirect back leaves out again.
	if r.FormValue("state") == "" {
		r.Form.Set("state", noState)
	}
	w = &redirectBack{ResponseWriter: w, issuer: s.o.BaseURL}
	ar, err := s.fosite.NewAuthorizeRequest(ctx, r)
	if err != nil {
		s.refuse("authorize", err)
		s.fosite.WriteAuthorizeError(ctx, w, ar, err)
		return
	}
	fail := func(err error) {
		s.refuse("authorize", err)
		s.fosite.WriteAuthorizeError(ctx, w, ar, err)
	}
	form := ar.GetRequestForm()
	// fosite checks PKCE when the code is issued; refusing here spares the human a page that
	// cannot succeed. OAuth 2.1: S256 only.
	if form.Get("code_challenge") == "" || form.Get("code_challenge_method") != "S256" {
		fail(fosite.ErrInvalidRequest.WithHint("PKCE is required, with code_challenge_method S256."))
		return
	}
	resource := form.Get("resource")
	slug, ok := strings.CutPrefix(resource, s.o.BaseURL+"/mcp/")
	var ep *endpointView
	if ok && slug != "" && !strings.ContainsAny(slug, "/?#") {
		if ep, err = s.endpoint(ctx, slug); err != nil {
			fail(fosite.ErrServerError.WithWrap(err))
			return
		}
	}
	if ep == nil {
		fail(&fosite.RFC6749Error{ErrorField: "invalid_target", CodeField: http.StatusBadRequest,
			DescriptionField: "The resource parameter is required: the MCP URL of an active endpoint of this server (" +
				s.o.BaseURL + "/mcp/<slug>)."})
		return
	}
	cl, _ := ar.GetClient().(*client)
	if cl == nil {
		fail(fosite.ErrInvalidClient)
		return
	}
	view := consentPage{
		Client: cl.Name, RedirectHost: ar.GetRedirectURI().Host, MCPURL: resource, Agent: ep.Agent, Human: ep.Human,
		Slug: ep.Slug, Action: s.o.BaseURL + "/authorize", Queues: ep.Queues, Verbs: ep.Verbs,
		csp: pageCSP(ar.GetRedirectURI()),
	}
	if view.RedirectHost == "" {
		view.RedirectHost = ar.GetRedirectURI().Scheme + ":"
	}
	var human store.ConsoleHuman
	if s.o.SignedIn != nil {
		h, ok, err := s.o.SignedIn(r)
		if err != nil {
			fail(fosite.ErrServerError.WithWrap(err))
			return
		}
		if ok {
			human, view.SignedIn, view.Operator = h, h.Name, h.Operator
			view.Owner = h.ID == ep.HumanID || h.Operator
		}
	}
	if r.Method == http.MethodGet {
		s.render(w, r, http.StatusOK, view, form)
		return
	}

	// POST: the human's answer. The CSRF token must match the cookie the page was shown with.
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostForm.Get("csrf"))) != 1 {
		s.refused.WithLabelValues("consent", "csrf").Inc()
		view.Error = "This form expired or did not come from this page. It is shown again: answer it once more."
		s.render(w, r, http.StatusForbidden, view, form)
		return
	}
	switch r.PostForm.Get("decision") {
	case "deny":
		s.log.Info("oauth consent denied", "endpoint", ep.ID)
		fail(fosite.ErrAccessDenied.WithHint("The human denied the request."))
		return
	case "approve":
	default:
		view.Error = "Choose Approve or Deny."
		s.render(w, r, http.StatusBadRequest, view, form)
		return
	}
	var doc []byte
	if view.Owner {
		// The owner, signed in: no approval code (console_oauth_approve checks ownership again).
		doc, err = s.st.ConsoleOAuthApprove(ctx, human.ID, ep.ID, clientHash(cl.ID), cl.Name, view.RedirectHost)
	} else {
		code := strings.TrimSpace(r.PostForm.Get("approval_code"))
		if code == "" {
			view.Error = "Enter the approval code."
			s.render(w, r, http.StatusBadRequest, view, form)
			return
		}
		sum := sha256.Sum256([]byte(code))
		doc, err = s.st.OAuthApprove(ctx, ep.ID, sum[:], clientHash(cl.ID), cl.Name, view.RedirectHost)
	}
	if err != nil {
		fail(fosite.ErrServerError.WithWrap(err))
		return
	}
	var verdict struct {
		Grant   string `json:"grant_id"`
		Refused string `json:"refused"`
	}
	_ = json.Unmarshal(doc, &verdict)
	switch verdict.Refused {
	case "":
	case "wrong_code":
		s.refused.WithLabelValues("consent", "wrong_code").Inc()
		s.log.Info("oauth consent refused", "endpoint", ep.ID, "reason", "wrong_code")
		view.Error = "That approval code is wrong, used or expired. Five wrong tries burn the endpoint's codes: then mint a new one."
		s.render(w, r, http.StatusForbidden, view, form)
		return
	default:
		fail(fosite.ErrAccessDenied.WithHint("The endpoint is no longer active."))
		return
	}
	for _, sc := range ar.GetRequestedScopes() {
		ar.GrantScope(sc) // the client can only have asked for allowedScopes (fosite checked)
	}
	ar.GrantAudience(resource)
	resp, err := s.fosite.NewAuthorizeResponse(ctx, ar, newSession(ep.ID, verdict.Grant, resource))
	if err != nil {
		fail(err)
		return
	}
	s.log.Info("oauth consent approved", "endpoint", ep.ID, "grant", verdict.Grant, "signed_in", view.Owner)
	s.fosite.WriteAuthorizeResponse(ctx, w, ar, resp)
}

// render shows the page with a fresh CSRF token (cookie and hidden field).
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, view consentPage, form url.Values) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: token, Path: "/authorize", HttpOnly: true,
		Secure: strings.HasPrefix(s.o.BaseURL, "https://"), SameSite: http.SameSiteLaxMode, MaxAge: 1800})
	keys := make([]string, 0, len(form))
	for k := range form {
		if !slices.Contains(pageFields, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range form[k] {
			view.Hidden = append(view.Hidden, hidden{k, v})
		}
	}
	view.Hidden = append(view.Hidden, hidden{"csrf", token})
	w.Header().Set("Content-Security-Policy", view.csp)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := page.Execute(w, view); err != nil {
		s.log.Warn("consent page render failed", "err", err)
	}
}
