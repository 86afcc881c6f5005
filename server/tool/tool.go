// Package tool is the model of an agent's MCP tool, shared by every tool family
// (server/todotools, server/webhooktools) and the MCP handler that serves them (server/mcpapi):
// a Tool (a verb of switchboard.verbs with its schemas, Effect and Run), the Call a Run gets,
// the Registry the server adds each family to, the schema helpers the families write their
// schemas with, and the validation of a call's arguments against its schema.
package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"switchboard/server/doorbell"
	"switchboard/server/safejson"
	"switchboard/server/store"
)

// Tool is one MCP tool: a verb of switchboard.verbs. A tool family (todo, webhook, route,
// rule, event) is a function returning its []Tool; the server adds it with one line,
// Registry.Add(FamilyTools()...). The handler takes care of the allowlist (tools/list shows
// only granted verbs; a known verb outside the grant answers forbidden), input validation
// (invalid_argument), rate limits, error shape, logging and metrics.
type Tool struct {
	Name string
	// Title is the name a host shows a human, e.g. "Claim the next todo".
	Title       string
	Description string
	// Effect is what the tool does to the world (effect.go); every tool names one.
	Effect Effect
	// Input is the arguments schema: type object (see Object). Arguments are validated
	// against it before Run; a mismatch is the tool error invalid_argument.
	Input *jsonschema.Schema
	// Output documents the structured result (optional; not enforced at run time).
	Output *jsonschema.Schema
	// Webhook puts the tool under the webhook-management rate limit instead of the tool one.
	Webhook bool
	// Waits marks a tool that may wait for work (wait_seconds): its time limit is the tool
	// timeout plus claim_wait_max_seconds.
	Waits bool
	// Run does the work with the validated arguments object and returns the structured
	// result, a JSON object. Errors are mapped by store.Classify: a *store.Error keeps its
	// code and message; anything else is internal (logged, never shown).
	Run func(ctx context.Context, c *Call, args json.RawMessage) (json.RawMessage, error)
}

// Typed adapts a handler of a decoded argument struct to Tool.Run. The arguments were
// validated against the schema first, so decoding only fails on values the schema allows but
// Go cannot hold (e.g. an integer beyond int64); that is invalid_argument too.
func Typed[In any](run func(ctx context.Context, c *Call, in In) (json.RawMessage, error)) func(context.Context, *Call, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, c *Call, args json.RawMessage) (json.RawMessage, error) {
		var in In
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, store.Errorf(store.CodeInvalidArgument, "arguments do not fit the input schema")
		}
		return run(ctx, c, in)
	}
}

// Call is what a tool's Run gets besides its arguments.
type Call struct {
	Endpoint store.Endpoint // the caller's endpoint and its immutable scope
	Session  string         // MCP session id
	Store    *store.Store
	Log      *slog.Logger
	BaseURL  string // public base URL of the server, without a trailing slash

	// For tools that wait (Tool.Waits): the session as the doorbell sees it (nil: no
	// doorbell), the longest wait allowed, and progress notifications (nil unless the request
	// carried a progressToken).
	Bell     *doorbell.Session
	WaitMax  time.Duration
	Progress func(ctx context.Context, progress, total float64, message string)

	// Attach, when Bell is nil (a 2026-07-28 request has no session), registers the call with
	// the doorbell for the length of one wait; the caller closes what it returns.
	Attach func() *doorbell.Session
}

// Registry holds the tools the server offers. Add every family before serving.
type Registry struct {
	tools []*Registered
}

// Add registers tools; it panics on a malformed definition (a programming error).
func (r *Registry) Add(tools ...Tool) {
	for _, t := range tools {
		if t.Name == "" || t.Run == nil || t.Input == nil || t.Input.Type != "object" {
			panic(fmt.Sprintf("tool: tool %q needs a name, Run and an object input schema", t.Name))
		}
		// The connector directories want a title and every hint on every tool; a name is at
		// most 64 characters there.
		if t.Title == "" || !t.Effect.set || len(t.Name) > 64 {
			panic(fmt.Sprintf("tool: tool %q needs a title, an Effect and a name of at most 64 characters", t.Name))
		}
		if slices.ContainsFunc(r.tools, func(c *Registered) bool { return c.Name == t.Name }) {
			panic(fmt.Sprintf("tool: tool %q registered twice", t.Name))
		}
		r.tools = append(r.tools, compile(t))
	}
}

// Names lists the registered tool names.
func (r *Registry) Names() []string {
	out := make([]string, len(r.tools))
	for i, t := range r.tools {
		out[i] = t.Name
	}
	return out
}

// Tools are the registered tools, in the order added.
func (r *Registry) Tools() []*Registered { return r.tools }

// Published is what tools/list shows for an endpoint granted every verb.
func (r *Registry) Published() []*mcp.Tool {
	out := make([]*mcp.Tool, len(r.tools))
	for i, t := range r.tools {
		out[i] = t.mcpTool
	}
	return out
}

// Registered is a Tool as the Registry holds it: its schemas resolved and marshalled once.
type Registered struct {
	Tool
	mcpTool  *mcp.Tool
	resolved *jsonschema.Resolved
	props    map[string]*jsonschema.Resolved
}

func compile(t Tool) *Registered {
	res, err := t.Input.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool: tool %q input schema: %v", t.Name, err))
	}
	props := map[string]*jsonschema.Resolved{}
	for name, p := range t.Input.Properties {
		pr, err := p.Resolve(nil)
		if err != nil {
			panic(fmt.Sprintf("tool: tool %q property %q: %v", t.Name, name, err))
		}
		props[name] = pr
	}
	// The schemas go to the SDK as the JSON they are, marshalled once: it marshals a schema
	// again wherever it reads one (every tools/list, and on 2026-07-28 every tools/call, whose
	// Mcp-Param header check re-reads the input schema), and a *jsonschema.Schema marshals by
	// reflection, a json.RawMessage by a copy (docs/benchmarks.md, MCP 2026-07-28 round two).
	mt := &mcp.Tool{Name: t.Name, Title: t.Title, Description: t.Description,
		Annotations: t.Effect.annotations(t.Title), InputSchema: mustJSON(t.Name, t.Input)}
	if t.Output != nil {
		mt.OutputSchema = mustJSON(t.Name, t.Output)
	}
	return &Registered{Tool: t, mcpTool: mt, resolved: res, props: props}
}

// mustJSON is a tool's schema as JSON; the schemas are written here, so an error is a bug.
func mustJSON(tool string, s *jsonschema.Schema) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tool: tool %q schema: %v", tool, err))
	}
	return b
}

// MCP is the tool as tools/list shows it.
func (t *Registered) MCP() *mcp.Tool { return t.mcpTool }

// Validate checks raw arguments against the input schema and returns them as an object.
// The refusal names the offending argument, never echoes a value.
func (t *Registered) Validate(raw json.RawMessage) (json.RawMessage, *store.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = json.RawMessage(`{}`)
	}
	// The same bounds as at the webhook door, so that nothing stored can poison a reader: the
	// arguments object is one level, its values may nest 64 more.
	rep, err := safejson.ScanDepth(raw, safejson.MaxDepth+1)
	if err != nil {
		return nil, store.Errorf(store.CodeInvalidArgument, "%s", err.Error())
	}
	if rep.Unstorable {
		if raw, err = t.sanitize(raw); err != nil {
			return nil, store.Classify(err)
		}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, store.Errorf(store.CodeInvalidArgument, "arguments must be a JSON object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, store.Errorf(store.CodeInvalidArgument, "arguments must be a JSON object")
	}
	if err := t.resolved.Validate(m); err == nil {
		return raw, nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, known := t.props[k]; !known {
			return nil, store.Errorf(store.CodeInvalidArgument, "unknown argument %q", Printable(k))
		}
	}
	for _, k := range t.Input.Required {
		if _, ok := m[k]; !ok {
			return nil, store.Errorf(store.CodeInvalidArgument, "missing required argument %q", k)
		}
	}
	for _, k := range keys {
		if err := t.props[k].Validate(m[k]); err != nil {
			return nil, store.Errorf(store.CodeInvalidArgument, "argument %q has an invalid value", k)
		}
	}
	return nil, store.Errorf(store.CodeInvalidArgument, "arguments do not match the input schema")
}

// sanitize applies the storage rule for text PostgreSQL cannot hold (NUL, unpaired surrogates,
// bytes that are not UTF-8): in a free-form JSON value (a result, a payload, params) it is
// replaced by U+FFFD, as in a delivery; anywhere else (ids, queues, filters, expressions) it
// cannot be what the caller meant, and is invalid_argument.
func (t *Registered) sanitize(raw json.RawMessage) (json.RawMessage, error) {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return nil, store.Errorf(store.CodeInvalidArgument, "arguments must be a JSON object")
	}
	out := make(map[string]json.RawMessage, len(args))
	for k, v := range args {
		rep, _ := safejson.Scan(v)
		if !rep.Unstorable {
			out[k] = v
			continue
		}
		if p := t.Input.Properties[k]; p == nil || !isAnyJSON(p) {
			return nil, store.Errorf(store.CodeInvalidArgument,
				"argument %q holds a NUL, an unpaired surrogate or bytes that are not UTF-8", Printable(k))
		}
		out[k] = safejson.Sanitize(v)
	}
	return json.Marshal(out)
}

// isAnyJSON: the schema is AnyJSON's, a free-form value.
func isAnyJSON(s *jsonschema.Schema) bool {
	return s.Type == "" && len(s.AnyOf) == 6 && s.AnyOf[0].Type == "object" && s.AnyOf[5].Type == "null"
}

// Printable shortens a caller-supplied name for a message or a log line: at most 64 bytes, no
// control characters.
func Printable(s string) string {
	if len(s) > 64 {
		s = s[:64]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// Vocabulary is the verb vocabulary of contract §3 (the table switchboard.verbs). A call of one
// of these outside the endpoint's allowlist answers forbidden, not "unknown tool".
var Vocabulary = []string{
	"list_todos", "get_todo", "claim", "claim_next", "complete", "fail", "heartbeat", "release",
	"create_webhook", "list_webhooks", "rotate_webhook", "delete_webhook",
	"add_webhook_route", "list_webhook_routes", "remove_webhook_route",
	"list_webhook_rules", "set_webhook_rules", "add_webhook_rule", "update_webhook_rule",
	"move_webhook_rule", "remove_webhook_rule", "test_webhook_rules",
	"list_webhook_events", "get_webhook_event",
}
