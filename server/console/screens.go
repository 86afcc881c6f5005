package console

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"switchboard/server/store"
)

// The screens of this file: Home, Vend (and an endpoint's page with rotate, revoke and its
// OAuth grants), Friends, Audit and Passkeys.

// decode reads a console function's jsonb into v; nil (not found) leaves v alone.
func decode(doc []byte, v any) error {
	if doc == nil {
		return nil
	}
	return json.Unmarshal(doc, v)
}

type endpointRow struct {
	ID        string   `json:"endpoint_id"`
	Slug      string   `json:"slug"`
	Agent     string   `json:"agent"`
	Human     string   `json:"human"`
	State     string   `json:"state"`
	Prefix    string   `json:"credential_prefix"`
	Queues    []string `json:"queues"`
	Verbs     []string `json:"verbs"`
	LeaseTTL  *int     `json:"lease_ttl_seconds"`
	CreatedAt string   `json:"created_at"`
	RotatedAt *string  `json:"rotated_at"`
	OldUntil  *string  `json:"old_credential_until"`
	Ceiling   struct {
		Max     int      `json:"max"`
		Sources []string `json:"allowed_source_types"`
		Queues  []string `json:"allowed_queues"`
	} `json:"ceiling"`
	Grants []struct {
		ID           string  `json:"grant_id"`
		ClientName   string  `json:"client_name"`
		RedirectHost string  `json:"redirect_host"`
		CreatedAt    string  `json:"created_at"`
		RevokedAt    *string `json:"revoked_at"`
		LiveTokens   int     `json:"live_tokens"`
	} `json:"grants"`
}

type queueRow struct {
	EndpointID    string   `json:"endpoint_id"`
	Slug          string   `json:"endpoint"`
	Queue         string   `json:"queue"`
	Pending       int64    `json:"pending"`
	Claimed       int64    `json:"claimed"`
	RetryWait     int64    `json:"retry_wait"`
	Dead          int64    `json:"dead_letter"`
	OldestPending *float64 `json:"oldest_pending_seconds"`
}

// HomeData is the home screen's: ChartSlot is where the activity chart goes (an SVG rendered
// by the server; empty until the chart is built).
type HomeData struct {
	Endpoints []endpointRow `json:"endpoints"`
	Queues    []queueRow    `json:"queues"`
	ChartSlot any
}

func (c *Console) home(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	doc, err := c.st.ConsoleHome(r.Context(), h.ID)
	var d HomeData
	if err == nil {
		err = decode(doc, &d)
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	if ch := c.homeChart(r, h); ch != nil {
		d.ChartSlot = ch
	}
	c.render(w, r, "home", http.StatusOK, view{Data: d})
}

// --- Vend ---

var familyLines = map[string]string{
	"todo":    "Todos: list, read, claim, complete, fail, heartbeat and release work in the granted queues.",
	"webhook": "Webhooks: create, list, rotate and delete the agent's own webhooks, within the ceiling below.",
	"route":   "Routes: send a webhook's deliveries to further queues (a friend's endpoint once they approve).",
	"rule":    "Rules: jq rules that filter, rename or route a webhook's deliveries; test them on stored ones.",
	"event":   "Events: read the deliveries a webhook received.",
}

type vendForm struct {
	Families []struct {
		Family string   `json:"family"`
		Verbs  []string `json:"verbs"`
		Line   string
	} `json:"families"`
	SourceTypes []string `json:"source_types"`
	// What was sent (shown again after bad input).
	Agent, Queues, WebhookQueues, WebhookMax, LeaseTTL string
	Verbs, Sources                                     map[string]bool
}

// vendResult is the one page that shows a credential.
type vendResult struct {
	Endpoint   endpointRow
	Credential string
	MCPURL     string
	ClaudeAdd  string
	MCPJSON    string
	Rotated    bool
}

func (c *Console) loadVendForm(r *http.Request) (vendForm, error) {
	var f vendForm
	doc, err := c.st.ConsoleVendForm(r.Context())
	if err == nil {
		err = decode(doc, &f)
	}
	for i := range f.Families {
		f.Families[i].Line = familyLines[f.Families[i].Family]
	}
	return f, err
}

func (c *Console) vendForm(w http.ResponseWriter, r *http.Request, _ store.ConsoleHuman) {
	f, err := c.loadVendForm(r)
	if err != nil {
		c.failed(w, r, err)
		return
	}
	// A fresh form: the todo verbs ticked, one queue, no webhooks.
	f.Verbs = map[string]bool{}
	for _, fam := range f.Families {
		if fam.Family == "todo" {
			for _, v := range fam.Verbs {
				f.Verbs[v] = true
			}
		}
	}
	f.Sources, f.WebhookMax = map[string]bool{}, "0"
	c.render(w, r, "vend", http.StatusOK, view{Data: f})
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// newCredential mints an endpoint credential as the CLI does: sbk_ and 32 random bytes.
func newCredential() (cred, prefix string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	cred = "sbk_" + base64.RawURLEncoding.EncodeToString(b)
	return cred, cred[:12]
}

func (c *Console) vend(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	f, err := c.loadVendForm(r)
	if err != nil {
		c.failed(w, r, err)
		return
	}
	f.Agent, f.Queues = strings.TrimSpace(r.PostForm.Get("agent")), r.PostForm.Get("queues")
	f.WebhookQueues, f.WebhookMax, f.LeaseTTL = r.PostForm.Get("webhook_queues"), r.PostForm.Get("webhook_max"), r.PostForm.Get("lease_ttl")
	f.Verbs, f.Sources = map[string]bool{}, map[string]bool{}
	for _, v := range r.PostForm["verbs"] {
		f.Verbs[v] = true
	}
	for _, s := range r.PostForm["sources"] {
		f.Sources[s] = true
	}
	bad := func(msg string) { c.render(w, r, "vend", http.StatusBadRequest, view{Data: f, Error: msg}) }
	v := store.ConsoleVend{Agent: f.Agent, Queues: splitList(f.Queues), Verbs: r.PostForm["verbs"]}
	v.WebhookSources, v.WebhookQueues = r.PostForm["sources"], splitList(f.WebhookQueues)
	if v.WebhookSources == nil {
		v.WebhookSources = []string{}
	}
	if v.WebhookQueues == nil {
		v.WebhookQueues = []string{}
	}
	if f.WebhookMax != "" {
		n, err := strconv.ParseInt(f.WebhookMax, 10, 32)
		if err != nil || n < 0 {
			bad("Webhook ceiling: a whole number, 0 or more.")
			return
		}
		v.WebhookMax = int32(n)
	}
	if f.LeaseTTL != "" {
		n, err := strconv.ParseInt(f.LeaseTTL, 10, 32)
		if err != nil || n < 1 || n > 86400 {
			bad("Lease TTL: a whole number of seconds, 1 to 86400 (or empty for the default).")
			return
		}
		n32 := int32(n)
		v.LeaseTTL = &n32
	}
	cred, prefix := newCredential()
	v.CredentialHash, v.CredentialPrefix = store.CredentialHash(cred), prefix
	doc, err := c.st.ConsoleEndpointVend(r.Context(), h.ID, v)
	if e := store.Classify(err); e != nil && e.Code != store.CodeInternal {
		bad(capitalize(e.Message) + ".")
		return
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	var ep endpointRow
	if err := decode(doc, &ep); err != nil {
		c.failed(w, r, err)
		return
	}
	c.render(w, r, "credential", http.StatusOK, view{Data: c.credentialPage(ep, cred, false)})
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func (c *Console) mcpURL(slug string) string {
	return strings.TrimRight(c.o.BaseURL, "/") + "/mcp/" + slug
}

func (c *Console) credentialPage(ep endpointRow, cred string, rotated bool) vendResult {
	u := c.mcpURL(ep.Slug)
	cfg, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{"switchboard": map[string]any{
		"type": "http", "url": u, "headers": map[string]string{"Authorization": "Bearer " + cred}}}}, "", "  ")
	return vendResult{Endpoint: ep, Credential: cred, MCPURL: u, Rotated: rotated, MCPJSON: string(cfg),
		ClaudeAdd: fmt.Sprintf(`claude mcp add --transport http switchboard %s --header "Authorization: Bearer %s"`, u, cred)}
}

// --- An endpoint: details, grants, rotate, revoke ---

func (c *Console) loadEndpoint(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) (endpointRow, bool) {
	var ep endpointRow
	doc, err := c.st.ConsoleEndpoint(r.Context(), h.ID, r.PathValue("id"))
	if err == nil {
		err = decode(doc, &ep)
	}
	if err != nil {
		c.failed(w, r, err)
		return ep, false
	}
	if doc == nil {
		c.notFound(w, r)
		return ep, false
	}
	return ep, true
}

func (c *Console) endpoint(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	if ep, ok := c.loadEndpoint(w, r, h); ok {
		c.render(w, r, "endpoint", http.StatusOK, view{Data: ep})
	}
}

type confirmData struct {
	Endpoint endpointRow
	Action   string // rotate, revoke
}

func (c *Console) rotateConfirm(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	if ep, ok := c.loadEndpoint(w, r, h); ok {
		c.render(w, r, "confirm", http.StatusOK, view{Data: confirmData{ep, "rotate"}})
	}
}

func (c *Console) revokeConfirm(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	if ep, ok := c.loadEndpoint(w, r, h); ok {
		c.render(w, r, "confirm", http.StatusOK, view{Data: confirmData{ep, "revoke"}})
	}
}

func (c *Console) rotate(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	ep, ok := c.loadEndpoint(w, r, h)
	if !ok {
		return
	}
	grace, err := time.ParseDuration(strings.TrimSpace(r.PostFormValue("grace")))
	if r.PostFormValue("grace") == "" {
		grace, err = 0, nil
	}
	if err != nil || grace < 0 || grace > 7*24*time.Hour {
		c.render(w, r, "confirm", http.StatusBadRequest, view{Data: confirmData{ep, "rotate"},
			Error: "Grace: a duration such as 10m or 1h, at most 168h (or empty for none)."})
		return
	}
	cred, prefix := newCredential()
	doc, err := c.st.ConsoleEndpointRotate(r.Context(), h.ID, ep.ID, store.CredentialHash(cred), prefix, grace)
	if e := store.Classify(err); e != nil && e.Code != store.CodeInternal {
		c.render(w, r, "confirm", http.StatusConflict, view{Data: confirmData{ep, "rotate"}, Error: capitalize(e.Message) + "."})
		return
	}
	if err == nil && doc != nil {
		err = decode(doc, &ep)
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	if doc == nil {
		c.notFound(w, r)
		return
	}
	c.render(w, r, "credential", http.StatusOK, view{Data: c.credentialPage(ep, cred, true)})
}

func (c *Console) revoke(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	doc, err := c.st.ConsoleEndpointRevoke(r.Context(), h.ID, r.PathValue("id"))
	if err != nil {
		c.failed(w, r, err)
		return
	}
	if doc == nil {
		c.notFound(w, r)
		return
	}
	http.Redirect(w, r, "/console/endpoints/"+r.PathValue("id"), http.StatusSeeOther)
}

func (c *Console) grantRevoke(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	doc, err := c.st.ConsoleGrantRevoke(r.Context(), h.ID, r.PathValue("id"))
	var g struct {
		Endpoint string `json:"endpoint_id"`
	}
	if err == nil {
		err = decode(doc, &g)
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	if doc == nil {
		c.notFound(w, r)
		return
	}
	http.Redirect(w, r, "/console/endpoints/"+g.Endpoint, http.StatusSeeOther)
}

// --- Friends ---

type friendRow struct {
	ID        string  `json:"id"`
	From      string  `json:"from_human"`
	To        string  `json:"to_human"`
	State     string  `json:"state"`
	Direction string  `json:"direction"`
	CreatedAt string  `json:"created_at"`
	DecidedAt *string `json:"decided_at"`
}

type friendsData struct {
	Incoming, Outgoing, Others []friendRow
	To                         string
}

func (c *Console) renderFriends(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman, status int, to, msg string) {
	doc, err := c.st.ConsoleFriends(r.Context(), h.ID)
	var rows []friendRow
	if err == nil {
		err = decode(doc, &rows)
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	d := friendsData{To: to}
	for _, f := range rows {
		switch f.Direction {
		case "incoming":
			d.Incoming = append(d.Incoming, f)
		case "outgoing":
			d.Outgoing = append(d.Outgoing, f)
		default:
			d.Others = append(d.Others, f)
		}
	}
	c.render(w, r, "friends", status, view{Data: d, Error: msg})
}

func (c *Console) friends(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	c.renderFriends(w, r, h, http.StatusOK, "", "")
}

func (c *Console) friendRequest(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	to := strings.TrimSpace(r.PostFormValue("to"))
	_, err := c.st.ConsoleFriendRequest(r.Context(), h.ID, to)
	if e := store.Classify(err); e != nil && e.Code != store.CodeInternal {
		c.renderFriends(w, r, h, http.StatusBadRequest, to, capitalize(e.Message)+".")
		return
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/friends", http.StatusSeeOther)
}

func (c *Console) friendDecide(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	state := map[string]string{"approve": "approved", "deny": "denied", "revoke": "revoked"}[r.PathValue("decision")]
	if state == "" {
		c.notFound(w, r)
		return
	}
	doc, err := c.st.ConsoleFriendDecide(r.Context(), h.ID, r.PathValue("id"), state)
	if e := store.Classify(err); e != nil && e.Code != store.CodeInternal {
		c.renderFriends(w, r, h, http.StatusConflict, "", capitalize(e.Message)+".")
		return
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	if doc == nil {
		c.notFound(w, r)
		return
	}
	http.Redirect(w, r, "/console/friends", http.StatusSeeOther)
}

// --- Audit ---

type auditRow struct {
	ID     int64           `json:"id"`
	Human  *string         `json:"human"`
	Action string          `json:"action"`
	Object string          `json:"object"`
	Detail json.RawMessage `json:"detail"`
	At     string          `json:"at"`
}

func (c *Console) audit(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	doc, err := c.st.ConsoleAuditList(r.Context(), h.ID, 200)
	var rows []auditRow
	if err == nil {
		err = decode(doc, &rows)
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	c.render(w, r, "audit", http.StatusOK, view{Data: rows})
}

// --- Passkeys ---

type passkeyRow struct {
	ID         string  `json:"id"`
	CreatedAt  string  `json:"created_at"`
	LastUsedAt *string `json:"last_used_at"`
}

func (c *Console) renderPasskeys(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman, status int, msg string) {
	doc, err := c.st.ConsolePasskeys(r.Context(), h.ID)
	var rows []passkeyRow
	if err == nil {
		err = decode(doc, &rows)
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	c.render(w, r, "passkeys", status, view{Data: rows, Error: msg})
}

func (c *Console) passkeys(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	c.renderPasskeys(w, r, h, http.StatusOK, "")
}

func (c *Console) passkeyRemove(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	_, err := c.st.ConsolePasskeyRemove(r.Context(), h.ID, r.PathValue("id"))
	e := store.Classify(err)
	switch {
	case e == nil:
		http.Redirect(w, r, "/console/passkeys", http.StatusSeeOther)
	case e.Code == store.CodeNotFound:
		c.notFound(w, r)
	case e.Code != store.CodeInternal:
		c.renderPasskeys(w, r, h, http.StatusConflict, capitalize(e.Message)+".")
	default:
		c.failed(w, r, err)
	}
}
