package console

import (
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"switchboard/server/store"
)

// The screens of this file: Queues (per-queue counts, the todo list with its filters, bulk
// redrive and cancel with the count shown before confirming, push), Dead letters (the same list
// on dead letters), a todo's page (redrive, cancel), and the chart on Home. Every read and write
// is a switchboard.console_* function with the signed-in human (server/store/console_queues.go).

// queueRoutes registers this file's screens and screen_webhooks.go's.
func (c *Console) queueRoutes() {
	c.screen("GET /console/queues", c.queues)
	c.screen("POST /console/queues/push", c.push)
	c.screen("GET /console/deadletters", c.deadLetters)
	c.screen("POST /console/todos/bulk", c.bulk)
	c.screen("GET /console/todos/{id}", c.todo)
	c.screen("POST /console/todos/{id}/{action}", c.todoAct)
	c.screen("GET /console/webhooks", c.webhooks)
	c.screen("GET /console/webhooks/{id}", c.webhook)
	c.screen("POST /console/webhooks/{id}/secret", c.setSecret)
	c.screen("GET /console/webhooks/{id}/deliveries/{event}", c.delivery)
}

func init() {
	// A whole number of seconds as a duration ("1h2m3s").
	funcs["seconds"] = func(s int64) string { return (time.Duration(s) * time.Second).String() }
}

// notFoundErr reports whether err is the store's not_found (another human's, malformed or
// unknown id alike): the caller answers the one not-found page.
func notFoundErr(err error) bool {
	var e *store.Error
	return errors.As(err, &e) && e.Code == store.CodeNotFound
}

// formErr is the message of a refusal the human can fix (bad input, a wrong state), or "" for a
// failure of ours.
func formErr(err error) string {
	var e *store.Error
	if errors.As(err, &e) && e.Code != store.CodeInternal && e.Code != store.CodeNotFound {
		return capitalize(e.Message) + "."
	}
	return ""
}

var viewStates = []struct{ Value, Label string }{
	{"", "any state"}, {"pending", "pending"}, {"claimed", "claimed"}, {"retry_wait", "waiting to retry"},
	{"dead_letter", "dead letter"}, {"done", "done"}, {"cancelled", "cancelled"},
}

// filterOf reads the list's filter from a query or a form.
func filterOf(v url.Values) store.TodoFilter {
	return store.TodoFilter{
		Queue: strings.TrimSpace(v.Get("queue")), State: v.Get("state"),
		Text: strings.TrimSpace(v.Get("q")), Endpoint: v.Get("endpoint"),
	}
}

// query is the filter as a query string (links to the next page, back from an action).
func query(f store.TodoFilter) url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"queue": f.Queue, "state": f.State, "q": f.Text, "endpoint": f.Endpoint} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// pushForm is the push form's input, kept when it is refused.
type pushForm struct {
	Target, Title, Payload string
}

// QueuesData is the queues and dead-letters screens'.
type QueuesData struct {
	Dead      bool // the dead-letters view
	Queues    []store.QueueRow
	Filter    store.TodoFilter
	States    []struct{ Value, Label string }
	Page      store.TodoPage
	NextURL   string
	Notice    string
	Push      pushForm
	Targets   []string // endpoint-id/queue pairs to push into
	TargetFor map[string]string
}

func (c *Console) queues(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	c.queuesPage(w, r, h, false, http.StatusOK, "", pushForm{})
}

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	c.queuesPage(w, r, h, true, http.StatusOK, "", pushForm{})
}

// queuesPage renders the list for the query's filter and page; errMsg is a form's refusal.
func (c *Console) queuesPage(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman, dead bool, status int, errMsg string, push pushForm) {
	q := r.URL.Query()
	f := filterOf(q)
	if dead {
		f.State = "dead_letter"
	}
	d := QueuesData{Dead: dead, Filter: f, States: viewStates, Push: push, TargetFor: map[string]string{}}
	var err error
	if d.Queues, err = c.st.ConsoleQueues(r.Context(), h); err != nil {
		c.failed(w, r, err)
		return
	}
	for _, row := range d.Queues {
		if row.EndpointState == "active" {
			t := row.EndpointID + "/" + row.Queue
			d.Targets = append(d.Targets, t)
			d.TargetFor[t] = row.Endpoint + " · " + row.Queue
		}
	}
	var beforeAt *time.Time
	if at, err := time.Parse(time.RFC3339Nano, q.Get("before_at")); err == nil && q.Get("before_id") != "" {
		beforeAt = &at
	}
	beforeID := ""
	if beforeAt != nil {
		beforeID = q.Get("before_id")
	}
	d.Page, err = c.st.ConsoleTodos(r.Context(), h, f, beforeAt, beforeID, 50)
	if err != nil {
		if msg := formErr(err); msg != "" || notFoundErr(err) {
			// A malformed filter or cursor in the query: the list without it, and why.
			errMsg, d.Filter = "That filter is not valid: "+strings.ToLower(msg), store.TodoFilter{}
			if dead {
				d.Filter.State = "dead_letter"
			}
			d.Page, err = c.st.ConsoleTodos(r.Context(), h, d.Filter, nil, "", 50)
			status = http.StatusBadRequest
		}
		if err != nil {
			c.failed(w, r, err)
			return
		}
	}
	if d.Page.Next != nil {
		v := query(d.Filter)
		v.Set("before_at", d.Page.Next.At)
		v.Set("before_id", d.Page.Next.ID)
		d.NextURL = r.URL.Path + "?" + v.Encode()
	}
	if n := q.Get("n"); n != "" {
		if count, err := strconv.Atoi(n); err == nil {
			switch q.Get("acted") {
			case "redrive":
				d.Notice = strconv.Itoa(count) + " todo(s) redriven."
			case "cancel":
				d.Notice = strconv.Itoa(count) + " todo(s) cancelled."
			case "push":
				d.Notice = "Todo pushed."
			}
		}
	}
	name := "queues"
	c.render(w, r, name, status, view{Error: errMsg, Data: d})
}

// BulkData is the confirmation page of a bulk action: the count it would take now.
type BulkData struct {
	Action   string
	View     string // dead: the dead-letters view
	Count    int64
	IDs      []string
	Filter   store.TodoFilter
	Back     string
	ByFilter bool
}

// bulk handles the list's bulk form. Without confirm it shows how many todos the action would
// take (nothing written); with confirm it acts, in one statement, and goes back to the list.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	if err := r.ParseForm(); err != nil {
		c.notFound(w, r)
		return
	}
	action, scope, _ := strings.Cut(r.PostForm.Get("do"), ":")
	f := filterOf(r.PostForm)
	back := "/console/queues"
	if r.PostForm.Get("view") == "dead" {
		back, f.State = "/console/deadletters", "dead_letter"
	}
	var ids []string
	if scope != "filter" {
		ids = r.PostForm["id"]
		if ids == nil {
			ids = []string{}
		}
	}
	if action != "redrive" && action != "cancel" {
		c.notFound(w, r)
		return
	}
	if ids != nil && len(ids) == 0 {
		r.URL.RawQuery = query(f).Encode()
		c.queuesPage(w, r, h, back == "/console/deadletters", http.StatusBadRequest, "Select at least one todo, or choose all that match the filter.", pushForm{})
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		n, err := c.st.ConsoleActionCount(r.Context(), h, action, ids, f)
		if err != nil {
			if msg := formErr(err); msg != "" {
				r.URL.RawQuery = ""
				c.queuesPage(w, r, h, back == "/console/deadletters", http.StatusBadRequest, msg, pushForm{})
				return
			}
			c.failed(w, r, err)
			return
		}
		c.render(w, r, "bulk", http.StatusOK, view{Data: BulkData{Action: action, View: r.PostForm.Get("view"), Count: n, IDs: ids, Filter: f,
			Back: back + "?" + query(f).Encode(), ByFilter: ids == nil}})
		return
	}
	n, err := c.st.ConsoleAct(r.Context(), h, action, ids, f)
	if err != nil {
		if msg := formErr(err); msg != "" {
			r.URL.RawQuery = ""
			c.queuesPage(w, r, h, back == "/console/deadletters", http.StatusBadRequest, msg, pushForm{})
			return
		}
		c.failed(w, r, err)
		return
	}
	object := "filter:" + query(f).Encode()
	if ids != nil {
		object = "todos:" + strings.Join(ids, ",")
	}
	c.Audit(r.Context(), h, "todos."+action, object)
	v := query(f)
	v.Set("acted", action)
	v.Set("n", strconv.FormatInt(n, 10))
	http.Redirect(w, r, back+"?"+v.Encode(), http.StatusSeeOther)
}

// push adds a todo from the queues screen's form; bad input shows the form again with its
// values and the reason, and writes nothing.
func (c *Console) push(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	if err := r.ParseForm(); err != nil {
		c.notFound(w, r)
		return
	}
	p := pushForm{Target: r.PostForm.Get("target"), Title: strings.TrimSpace(r.PostForm.Get("title")),
		Payload: strings.TrimSpace(r.PostForm.Get("payload"))}
	again := func(msg string) {
		r.URL.RawQuery = ""
		c.queuesPage(w, r, h, false, http.StatusBadRequest, msg, p)
	}
	endpoint, queue, ok := strings.Cut(p.Target, "/")
	if !ok {
		again("Choose the queue to push into.")
		return
	}
	var payload json.RawMessage
	if p.Payload != "" {
		if !json.Valid([]byte(p.Payload)) {
			again("The payload is not valid JSON.")
			return
		}
		payload = json.RawMessage(p.Payload)
	}
	id, err := c.st.ConsolePush(r.Context(), h, endpoint, queue, p.Title, payload)
	if err != nil {
		if msg := formErr(err); msg != "" {
			again(msg)
			return
		}
		if notFoundErr(err) {
			again("Choose the queue to push into.")
			return
		}
		c.failed(w, r, err)
		return
	}
	c.Audit(r.Context(), h, "todo.push", "todo:"+id)
	http.Redirect(w, r, "/console/todos/"+id+"?pushed=1", http.StatusSeeOther)
}

// TodoData is a todo's page.
type TodoData struct {
	T       store.TodoDetail
	Payload string // pretty-printed
	Result  string
	Routing string
	Notice  string
	Error   string
}

func pretty(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func (c *Console) todo(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	c.todoPage(w, r, h, http.StatusOK, "")
}

func (c *Console) todoPage(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman, status int, errMsg string) {
	t, err := c.st.ConsoleTodo(r.Context(), h, r.PathValue("id"))
	if notFoundErr(err) {
		c.notFound(w, r)
		return
	}
	if err != nil {
		c.failed(w, r, err)
		return
	}
	d := TodoData{T: t, Payload: pretty(t.Payload), Result: pretty(t.Result), Routing: pretty(t.Routing)}
	switch {
	case r.URL.Query().Get("pushed") != "":
		d.Notice = "Todo pushed."
	case r.URL.Query().Get("acted") == "redrive":
		d.Notice = "Redriven: it is pending again with a fresh attempt budget."
	case r.URL.Query().Get("acted") == "cancel":
		d.Notice = "Cancelled."
	}
	c.render(w, r, "todo", status, view{Error: errMsg, Data: d})
}

// todoAct redrives or cancels one todo; a state that does not allow it is shown on its page.
func (c *Console) todoAct(w http.ResponseWriter, r *http.Request, h store.ConsoleHuman) {
	action := r.PathValue("action")
	if action != "redrive" && action != "cancel" {
		c.notFound(w, r)
		return
	}
	id := r.PathValue("id")
	err := c.st.ConsoleTodoAct(r.Context(), h, action, id)
	if notFoundErr(err) {
		c.notFound(w, r)
		return
	}
	if err != nil {
		if msg := formErr(err); msg != "" {
			r.URL.RawQuery = ""
			c.todoPage(w, r, h, http.StatusConflict, msg)
			return
		}
		c.failed(w, r, err)
		return
	}
	c.Audit(r.Context(), h, "todo."+action, "todo:"+id)
	http.Redirect(w, r, "/console/todos/"+url.PathEscape(id)+"?acted="+action, http.StatusSeeOther)
}

// ChartData is the activity section of Home.
type ChartData struct {
	Minutes, Hours template.HTML
	Chart          store.Chart
}

// homeChart draws Home's charts for the human (nil on a failure: Home shows the rest).
func (c *Console) homeChart(r *http.Request, h store.ConsoleHuman) *ChartData {
	ch, err := c.st.ConsoleChart(r.Context(), h)
	if err != nil {
		c.log.Error("console: chart failed", "err", store.Classify(err).Unwrap())
		return nil
	}
	return &ChartData{
		Minutes: chartSVG("chart-m", "Todos per minute, last hour", ch.Minutes, minuteLabel),
		Hours:   chartSVG("chart-h", "Todos per hour, last day", ch.Hours, hourLabel),
		Chart:   ch,
	}
}
