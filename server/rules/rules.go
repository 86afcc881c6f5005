// Package rules implements per-webhook jq routing rules (CONTRACT §6):
// validation of a saved list (Normalize), compilation (Compile, Cache) and
// bounded, fail-closed evaluation of a delivery envelope (Program.Evaluate).
//
// The package has no storage and no knowledge of grants: checking queues and
// endpoints against the webhook's grant is the caller's job.
//
// Choices where the contract is silent:
//   - Absent params (nil, empty or JSON null) mean {}; the 16 KiB bound is on
//     the compacted JSON.
//   - Forbidden names are refused wherever they are called, even if the
//     expression defines a function of that name.
//   - No match: Disposition "default" (or "dropped" when the default action
//     drops); the trace has stage "default" and the effective action ({} when
//     there is no default action).
//   - Fault causes: "timeout" (the 50 ms rule limit), "budget" (the 250 ms
//     delivery limit or the caller's earlier deadline, or a previous
//     evaluation of the same Program still stuck in one gojq step),
//     "canceled" (the caller's context), "error: <short text>".
//
// Limits of the in-process bound: gojq checks the context between steps, and
// Evaluate abandons a worker stuck inside one step ~10 ms after its deadline.
// It cannot reclaim what that step allocates: `"x" * 1e9` builds a 1 GB
// string in one step (non-preemptible copy, stalling the GC and with it the
// whole process), and `reduce range(40) as $i (0; [.,.]) | tojson` is
// exponential in one step. Rule authors are authenticated agents; a hard
// memory bound would need a separate process.
package rules

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits from CONTRACT §6.
const (
	MaxRules        = 32
	MaxIDLen        = 64
	MaxNameLen      = 128
	MaxExprLen      = 4096
	MaxEndpoints    = 16
	MaxParamsBytes  = 16 << 10
	maxValueLen     = 256 // queue names and endpoint ids
	maxRawParamsLen = 1 << 20
)

// Stable error codes (CONTRACT §4.3).
const (
	CodeInvalidExpression = "invalid_expression"
	CodeForbiddenFunction = "forbidden_function"
	CodeInvalidRule       = "invalid_rule"
	CodeTooManyRules      = "too_many_rules"
	CodeInvalidParams     = "invalid_params"
	CodeInvalidArgument   = "invalid_argument"
)

// Action is what a matching rule (or the default) does with a delivery:
// exactly one of {Queue, Endpoints?} or {Drop: true}.
type Action struct {
	Queue     string   `json:"queue,omitempty"`
	Endpoints []string `json:"endpoints,omitempty"`
	Drop      bool     `json:"drop,omitempty"`
}

// Rule is one entry of a webhook's ordered rule list.
type Rule struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Expr   string `json:"expr"`
	Action Action `json:"action"`
}

// Error carries a stable contract code and a short, fixed human message.
type Error struct{ Code, Message string }

// Error renders the contract's "<code>: <message>" form.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (a Action) clone() Action {
	if a.Endpoints != nil {
		a.Endpoints = append([]string(nil), a.Endpoints...)
	}
	return a
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func mintID(taken map[string]bool) string {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("rules: crypto/rand failed: " + err.Error())
		}
		id := "r-" + hex.EncodeToString(b[:])
		if !taken[id] {
			return id
		}
	}
}

// normalizeAction checks the shape of an action; where names the action in
// error messages ("rule 3 (id x)" or "default_action").
func normalizeAction(a Action, where string) (Action, *Error) {
	if a.Drop {
		if a.Queue != "" || len(a.Endpoints) > 0 {
			return Action{}, errorf(CodeInvalidRule, "%s: action drop cannot be combined with queue or endpoints", where)
		}
		return Action{Drop: true}, nil
	}
	if a.Queue == "" {
		if len(a.Endpoints) > 0 {
			return Action{}, errorf(CodeInvalidRule, "%s: action endpoints require a queue", where)
		}
		return Action{}, errorf(CodeInvalidRule, "%s: action must be {queue, endpoints?} or {drop: true}", where)
	}
	if len(a.Queue) > maxValueLen || !utf8.ValidString(a.Queue) {
		return Action{}, errorf(CodeInvalidRule, "%s: action queue is too long or not valid UTF-8", where)
	}
	if len(a.Endpoints) > MaxEndpoints {
		return Action{}, errorf(CodeInvalidRule, "%s: action names more than %d endpoints", where, MaxEndpoints)
	}
	out := Action{Queue: a.Queue}
	if len(a.Endpoints) > 0 {
		seen := make(map[string]bool, len(a.Endpoints))
		out.Endpoints = make([]string, 0, len(a.Endpoints))
		for _, ep := range a.Endpoints {
			if ep == "" || len(ep) > maxValueLen || !utf8.ValidString(ep) {
				return Action{}, errorf(CodeInvalidRule, "%s: action endpoints must be non-empty ids", where)
			}
			if seen[ep] {
				return Action{}, errorf(CodeInvalidRule, "%s: action endpoints contain a duplicate", where)
			}
			seen[ep] = true
			out.Endpoints = append(out.Endpoints, ep)
		}
	}
	return out, nil
}

// Normalize validates a whole rule list, its optional default action and its
// optional params, and returns normalized copies: ids minted where empty,
// empty endpoint lists dropped, params decoded for gojq. Absent params (nil,
// empty or JSON null) become an empty object. Every expression is parsed,
// checked for forbidden functions and unbound variables, and compiled.
// Errors are *Error.
func Normalize(rules []Rule, def *Action, params json.RawMessage) ([]Rule, *Action, map[string]any, error) {
	if len(rules) > MaxRules {
		return nil, nil, nil, errorf(CodeTooManyRules, "a webhook has at most %d rules", MaxRules)
	}
	taken := make(map[string]bool, len(rules))
	for i, r := range rules {
		if r.ID == "" {
			continue
		}
		if !validID(r.ID) {
			return nil, nil, nil, errorf(CodeInvalidRule, "rule %d: id must be 1-64 characters of A-Z a-z 0-9 _ -", i)
		}
		if taken[r.ID] {
			return nil, nil, nil, errorf(CodeInvalidRule, "rule %d: duplicate id %s", i, r.ID)
		}
		taken[r.ID] = true
	}
	out := make([]Rule, 0, len(rules))
	for i, r := range rules {
		if r.ID == "" {
			r.ID = mintID(taken)
			taken[r.ID] = true
		}
		where := fmt.Sprintf("rule %d (id %s)", i, r.ID)
		if len(r.Name) > MaxNameLen || !utf8.ValidString(r.Name) {
			return nil, nil, nil, errorf(CodeInvalidRule, "%s: name must be at most %d bytes of UTF-8", where, MaxNameLen)
		}
		if strings.TrimSpace(r.Expr) == "" {
			return nil, nil, nil, errorf(CodeInvalidRule, "%s: expr is required", where)
		}
		if len(r.Expr) > MaxExprLen {
			return nil, nil, nil, errorf(CodeInvalidRule, "%s: expr must be at most %d bytes", where, MaxExprLen)
		}
		act, err := normalizeAction(r.Action, where)
		if err != nil {
			return nil, nil, nil, err
		}
		r.Action = act
		if _, err := compileExpr(r.Expr, where); err != nil {
			return nil, nil, nil, err
		}
		out = append(out, r)
	}
	var outDef *Action
	if def != nil {
		act, err := normalizeAction(*def, "default_action")
		if err != nil {
			return nil, nil, nil, err
		}
		outDef = &act
	}
	p, perr := decodeParams(params)
	if perr != nil {
		return nil, nil, nil, perr
	}
	return out, outDef, p, nil
}

func decodeParams(raw json.RawMessage) (map[string]any, *Error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return map[string]any{}, nil
	}
	bad := errorf(CodeInvalidParams, "params must be a JSON object of at most 16 KiB")
	if len(raw) > maxRawParamsLen || trimmed[0] != '{' {
		return nil, bad
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, trimmed); err != nil || compact.Len() > MaxParamsBytes {
		return nil, bad
	}
	v, err := decodeJSON(compact.Bytes())
	if err != nil {
		return nil, bad
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, bad
	}
	return m, nil
}
