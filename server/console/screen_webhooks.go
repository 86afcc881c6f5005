package console

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"switchboard/server/rules"
	"switchboard/server/store"
)

// The Webhooks screens: the list (source type, ingest URL, refusals and the last one), a
// webhook's page (its delivery log linked to the todos each delivery made, the provider-issued
// secret's password field, its rules with a dry run against a stored delivery), and one
// delivery. The secret goes in through switchboard.webhook_set_secret (as `switchboard webhook
// set-secret`) and is never written back into a page, not even after a refusal.

// WebhooksData is the list's.
type WebhooksData struct {
	Hooks []hookView
}

type hookView struct {
	store.ConsoleWebhook
	IngestURL string
}

func (c *Console) ingestURL(token string) string {
	return strings.TrimRight(c.o.BaseURL, "/") + "/webhooks/w/" + token
}

func (c *Console) webhooks(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	hooks, err := c.st.ConsoleWebhooks(r.Context(), h)
	if err != nil {
		c.failed(w, r, err)
		return
	}
	d := WebhooksData{}
	for _, wh := range hooks {
		d.Hooks = append(d.Hooks, hookView{wh, c.ingestURL(wh.IngestToken)})
	}
	c.render(w, r, "webhooks", http.StatusOK, view{Data: d})
}

// WebhookData is a webhook's page.
type WebhookData struct {
	Hook     hookView
	Log      store.DeliveryPage
	NextURL  string
	Rules    []rules.Rule
	Default  string
	Notice   string
	TTL      string // the previous-secret window the form last had (never the secret)
	DryRunID string
	DryRun   *dryRun
}

type dryRun struct {
	Delivery int64
	Decision string
	Trace    string
}

func (c *Console) webhook(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	c.webhookPage(w, r, h, http.StatusOK, "", "")
}

// webhookPage renders a webhook's page; errMsg is a form's refusal, ttl the form's window.
func (c *Console) webhookPage(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman, status int, errMsg, ttl string) {
	id := r.PathValue("id")
	hook, err := c.st.ConsoleWebhook(r.Context(), h, id)
	if notFoundErr(err) {
		c.notFound(w, r)
		return
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	q := r.URL.Query()
	var before *int64
	if b, err := strconv.ParseInt(q.Get("before"), 10, 64); err == nil && b > 0 {
		before = &b
	}
	d := WebhookData{Hook: hookView{hook, c.ingestURL(hook.IngestToken)}, TTL: ttl}
	if d.Log, err = c.st.ConsoleDeliveries(r.Context(), h, hook.ID, before, 50); err != nil {
		c.failed(w, r, err)
		return
	}
	if d.Log.Next != nil {
		d.NextURL = "/console/webhooks/" + hook.ID + "?before=" + strconv.FormatInt(*d.Log.Next, 10)
	}
	var set struct {
		Rules         []rules.Rule    `json:"rules"`
		DefaultAction *rules.Action   `json:"default_action"`
		Params        map[string]any  `json:"params"`
		TargetQueue   string          `json:"target_queue"`
		Grant         json.RawMessage `json:"grant"`
	}
	if err := json.Unmarshal(hook.Rules, &set); err != nil {
		c.failed(w, r, store.Internal(err))
		return
	}
	d.Rules = set.Rules
	if set.DefaultAction != nil {
		b, _ := json.Marshal(set.DefaultAction)
		d.Default = string(b)
	}
	if q.Get("secret") == "set" {
		d.Notice = "The new secret is in force."
	}
	// The dry run: the saved rules on a stored delivery, evaluated here (server/rules), nothing saved.
	if ev := strings.TrimSpace(q.Get("dry_run")); ev != "" && errMsg == "" {
		d.DryRunID = ev
		del, err := c.st.ConsoleDelivery(r.Context(), h, hook.ID, ev)
		switch {
		case notFoundErr(err):
			errMsg, status = "No stored delivery "+strconv.Quote(ev)+" of this webhook.", http.StatusBadRequest
		case err != nil:
			c.failed(w, r, err)
			return
		default:
			prog, err := rules.Compile(set.Rules, set.DefaultAction, set.Params)
			if err != nil {
				errMsg, status = "The saved rules do not compile: "+err.Error(), http.StatusBadRequest
				break
			}
			kind, ctype := "", ""
			if del.EventType != nil {
				kind = *del.EventType
			}
			if del.ContentType != nil {
				ctype = *del.ContentType
			}
			var headers map[string]string
			_ = json.Unmarshal(del.Headers, &headers)
			env := rules.Envelope(del.Source, kind, del.WebhookID, del.TrustMode, del.Verified, ctype, del.PayloadSize, headers, del.Payload)
			dec := prog.Evaluate(r.Context(), env)
			if !dec.Drop && !dec.Faulted && dec.Queue == "" {
				dec.Queue = set.TargetQueue
			}
			dec.NameQueue(set.TargetQueue)
			db, _ := json.MarshalIndent(dec, "", "  ")
			tb, _ := json.MarshalIndent(dec.Trace, "", "  ")
			d.DryRun = &dryRun{Delivery: del.ID, Decision: string(db), Trace: string(tb)}
		}
	}
	c.render(w, r, "webhook", status, view{Error: errMsg, Data: d})
}

// setSecret takes the provider-issued secret from the password field. A refusal shows the page
// again with the reason and an empty field; nothing is written.
func (c *Console) setSecret(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	if err := r.ParseForm(); err != nil {
		c.notFound(w, r)
		return
	}
	id := r.PathValue("id")
	secret := strings.TrimSpace(r.PostForm.Get("secret"))
	ttlText := strings.TrimSpace(r.PostForm.Get("previous_ttl"))
	again := func(msg string) {
		r.URL.RawQuery = ""
		c.webhookPage(w, r, h, http.StatusBadRequest, msg, ttlText)
	}
	var ttl time.Duration
	if ttlText != "" {
		d, err := time.ParseDuration(ttlText)
		if err != nil || d < 0 || d > 30*24*time.Hour {
			again("The previous secret's window must be a duration such as 24h, at most 720h.")
			return
		}
		ttl = d
	}
	if secret == "" {
		again("Paste the secret your provider issued.")
		return
	}
	err := c.st.ConsoleSetSecret(r.Context(), h, id, secret, ttl)
	if notFoundErr(err) {
		c.notFound(w, r)
		return
	}
	if err != nil {
		if msg := formErr(err); msg != "" {
			again(msg) // the SQL's message names the expected shape, never the input
			return
		}
		c.failed(w, r, err)
		return
	}
	c.Audit(r.Context(), h, "webhook.set_secret", "webhook:"+id)
	http.Redirect(w, r, "/console/webhooks/"+id+"?secret=set", http.StatusSeeOther)
}

// DeliveryData is one delivery's page.
type DeliveryData struct {
	Hook     string
	D        store.LoggedDelivery
	Headers  string
	Payload  string
	Routing  string
	DryRunTo string
}

func (c *Console) delivery(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	hook := r.PathValue("id")
	del, err := c.st.ConsoleDelivery(r.Context(), h, hook, r.PathValue("event"))
	if notFoundErr(err) {
		c.notFound(w, r)
		return
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	c.render(w, r, "delivery", http.StatusOK, view{Data: DeliveryData{Hook: del.WebhookID, D: del,
		Headers: pretty(del.Headers), Payload: pretty(del.Payload), Routing: pretty(del.Routing)}})
}
