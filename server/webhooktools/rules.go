package webhooktools

import (
	"context"
	"encoding/json"
	"net/http"

	"switchboard/server/receiver/provider"
	"switchboard/server/rules"
	"switchboard/server/store"
)

// RuleSet is a webhook's rule list with its grant (what rules may name), as every rule verb returns it.
type RuleSet struct {
	WebhookID     string         `json:"webhook_id"`
	TargetQueue   string         `json:"target_queue"`
	Rules         []rules.Rule   `json:"rules"`
	DefaultAction *rules.Action  `json:"default_action,omitempty"`
	Params        map[string]any `json:"params"`
	Grant         Grant          `json:"grant"`
	Version       int64          `json:"version"`
}

type Grant struct {
	Queues    []string `json:"queues"`
	Endpoints []string `json:"endpoints"`
}

type SetRulesIn struct {
	WebhookID     string        `json:"webhook_id"`
	Rules         []rules.Rule  `json:"rules" jsonschema:"ordered list, at most 32; first match wins"`
	DefaultAction *rules.Action `json:"default_action,omitempty" jsonschema:"action when no rule matches"`
	Params        any           `json:"params,omitempty" jsonschema:"JSON object bound as $params (omit to keep the stored one)"`
}

type AddRuleIn struct {
	WebhookID string       `json:"webhook_id"`
	ID        string       `json:"id,omitempty" jsonschema:"1-64 of [A-Za-z0-9_-]; minted when omitted"`
	Name      string       `json:"name,omitempty"`
	Expr      string       `json:"expr" jsonschema:"jq expression over {source, kind, webhook_id, trust_mode, verified, content_type, size, headers, payload}"`
	Action    rules.Action `json:"action" jsonschema:"{queue, endpoints?} or {drop: true}"`
	Position  *int         `json:"position,omitempty" jsonschema:"0-based; default append"`
}

type UpdateRuleIn struct {
	WebhookID string        `json:"webhook_id"`
	RuleID    string        `json:"rule_id"`
	Name      *string       `json:"name,omitempty"`
	Expr      *string       `json:"expr,omitempty"`
	Action    *rules.Action `json:"action,omitempty"`
}

type MoveRuleIn struct {
	WebhookID string `json:"webhook_id"`
	RuleID    string `json:"rule_id"`
	Position  int    `json:"position" jsonschema:"0-based, clamped to the list"`
}

type RemoveRuleIn struct {
	WebhookID string `json:"webhook_id"`
	RuleID    string `json:"rule_id"`
}

func (s *Service) ListRules(ctx context.Context, endpoint string, in WebhookIDIn) (RuleSet, error) {
	var out RuleSet
	raw, err := s.st.RulesGet(ctx, endpoint, in.WebhookID)
	err = decode(raw, err, &out)
	return out, err
}

// save validates the shape and every jq expression (Go), then the grant (SQL, under a row lock).
// expected makes it a compare-and-swap against the version the edit was based on; dryRun
// checks without saving (a transaction that is rolled back).
func (s *Service) save(ctx context.Context, dryRun bool, endpoint, webhook string, list []rules.Rule,
	def *rules.Action, params any, expected *int64) (RuleSet, error) {
	var rawParams json.RawMessage
	if params != nil {
		rawParams, _ = json.Marshal(params)
	}
	list, def, _, err := rules.Normalize(list, def, rawParams)
	if err != nil {
		return RuleSet{}, ruleError(err)
	}
	if list == nil {
		list = []rules.Rule{}
	}
	listJSON, _ := json.Marshal(list)
	var defJSON []byte
	if def != nil {
		defJSON, _ = json.Marshal(def)
	}
	r := store.RuleSave{Rules: listJSON, DefaultAction: defJSON, Params: []byte(rawParams), Expected: expected}
	call := s.st.RulesSave
	if dryRun {
		call = s.st.RulesTry
	}
	raw, err := call(ctx, endpoint, webhook, r)
	var out RuleSet
	if err := decode(raw, err, &out); err != nil {
		return RuleSet{}, err
	}
	return out, nil
}

func (s *Service) SetRules(ctx context.Context, endpoint string, in SetRulesIn) (RuleSet, error) {
	return s.save(ctx, false, endpoint, in.WebhookID, in.Rules, in.DefaultAction, in.Params, nil)
}

// edit reads the list, applies change, and saves it only if nobody saved in between.
func (s *Service) edit(ctx context.Context, endpoint, webhook string, change func(*RuleSet) error) (RuleSet, error) {
	cur, err := s.ListRules(ctx, endpoint, WebhookIDIn{WebhookID: webhook})
	if err != nil {
		return RuleSet{}, err
	}
	if err := change(&cur); err != nil {
		return RuleSet{}, err
	}
	return s.save(ctx, false, endpoint, webhook, cur.Rules, cur.DefaultAction, nil, &cur.Version)
}

func indexOf(list []rules.Rule, id string) int {
	for i, r := range list {
		if r.ID == id {
			return i
		}
	}
	return -1
}

func clamp(pos, n int) int {
	return max(0, min(pos, n))
}

func (s *Service) AddRule(ctx context.Context, endpoint string, in AddRuleIn) (RuleSet, error) {
	return s.edit(ctx, endpoint, in.WebhookID, func(rs *RuleSet) error {
		pos := len(rs.Rules)
		if in.Position != nil {
			pos = clamp(*in.Position, len(rs.Rules))
		}
		r := rules.Rule{ID: in.ID, Name: in.Name, Expr: in.Expr, Action: in.Action}
		rs.Rules = append(rs.Rules[:pos:pos], append([]rules.Rule{r}, rs.Rules[pos:]...)...)
		return nil
	})
}

func (s *Service) UpdateRule(ctx context.Context, endpoint string, in UpdateRuleIn) (RuleSet, error) {
	return s.edit(ctx, endpoint, in.WebhookID, func(rs *RuleSet) error {
		i := indexOf(rs.Rules, in.RuleID)
		if i < 0 {
			return store.Errorf(store.CodeRuleNotFound, "no rule with that id")
		}
		if in.Name != nil {
			rs.Rules[i].Name = *in.Name
		}
		if in.Expr != nil {
			rs.Rules[i].Expr = *in.Expr
		}
		if in.Action != nil {
			rs.Rules[i].Action = *in.Action
		}
		return nil
	})
}

func (s *Service) MoveRule(ctx context.Context, endpoint string, in MoveRuleIn) (RuleSet, error) {
	return s.edit(ctx, endpoint, in.WebhookID, func(rs *RuleSet) error {
		i := indexOf(rs.Rules, in.RuleID)
		if i < 0 {
			return store.Errorf(store.CodeRuleNotFound, "no rule with that id")
		}
		r := rs.Rules[i]
		rest := append(rs.Rules[:i:i], rs.Rules[i+1:]...)
		pos := clamp(in.Position, len(rest))
		rs.Rules = append(rest[:pos:pos], append([]rules.Rule{r}, rest[pos:]...)...)
		return nil
	})
}

// RemoveRule is idempotent: an absent rule id leaves the list as it is.
func (s *Service) RemoveRule(ctx context.Context, endpoint string, in RemoveRuleIn) (RuleSet, error) {
	cur, err := s.ListRules(ctx, endpoint, WebhookIDIn{WebhookID: in.WebhookID})
	if err != nil {
		return RuleSet{}, err
	}
	i := indexOf(cur.Rules, in.RuleID)
	if i < 0 {
		return cur, nil
	}
	cur.Rules = append(cur.Rules[:i:i], cur.Rules[i+1:]...)
	return s.save(ctx, false, endpoint, in.WebhookID, cur.Rules, cur.DefaultAction, nil, &cur.Version)
}

type TestRulesIn struct {
	WebhookID     string            `json:"webhook_id"`
	Payload       any               `json:"payload,omitempty" jsonschema:"a sample payload (exactly one of payload, event_id)"`
	EventID       *int64            `json:"event_id,omitempty" jsonschema:"a stored event of this webhook"`
	Headers       map[string]string `json:"headers,omitempty" jsonschema:"sample headers (with payload)"`
	Rules         []rules.Rule      `json:"rules,omitempty" jsonschema:"candidate rules; omit to test the saved list"`
	DefaultAction *rules.Action     `json:"default_action,omitempty"`
	Params        any               `json:"params,omitempty"`
}

type TestRulesOut struct {
	Decision rules.Decision `json:"decision"`
	Trace    rules.Trace    `json:"trace"`
	Envelope any            `json:"envelope"`
}

// TestRules is the dry run: it evaluates a payload or a stored event of the webhook against the
// saved rules or candidate ones (checked against the grant in a transaction that is rolled back)
// and persists nothing.
func (s *Service) TestRules(ctx context.Context, endpoint string, in TestRulesIn) (TestRulesOut, error) {
	if (in.Payload == nil) == (in.EventID == nil) {
		return TestRulesOut{}, store.Errorf(store.CodeInvalidArgument, "give exactly one of payload and event_id")
	}
	var hook struct {
		Source    string `json:"source_type"`
		TrustMode string `json:"trust_mode"`
	}
	raw, err := s.st.OwnedWebhook(ctx, endpoint, in.WebhookID)
	if err := decode(raw, err, &hook); err != nil {
		return TestRulesOut{}, err
	}

	set, err := s.ListRules(ctx, endpoint, WebhookIDIn{WebhookID: in.WebhookID})
	if err != nil {
		return TestRulesOut{}, err
	}
	if in.Rules != nil || in.DefaultAction != nil || in.Params != nil {
		// Omitted rules mean the saved list, and with it the saved default action (unless one is
		// given); candidate rules stand alone, as set_webhook_rules would save them.
		candidate, def := in.Rules, in.DefaultAction
		if candidate == nil {
			candidate = set.Rules
			if def == nil {
				def = set.DefaultAction
			}
		}
		if set, err = s.save(ctx, true, endpoint, in.WebhookID, candidate, def, in.Params, nil); err != nil {
			return TestRulesOut{}, err
		}
	}

	var env any
	if in.EventID != nil {
		ev, err := s.eventOf(ctx, endpoint, in.WebhookID, *in.EventID)
		if err != nil {
			return TestRulesOut{}, err
		}
		kind, ctype := "", ""
		if ev.EventType != nil {
			kind = *ev.EventType
		}
		if ev.ContentType != nil {
			ctype = *ev.ContentType
		}
		var headers map[string]string
		_ = json.Unmarshal(ev.Headers, &headers)
		env = rules.Envelope(ev.Source, kind, ev.WebhookID, ev.TrustMode, ev.Verified, ctype, ev.PayloadSize, headers, ev.Payload)
	} else {
		payload, _ := json.Marshal(in.Payload)
		h := http.Header{}
		for k, v := range in.Headers {
			h.Set(k, v)
		}
		headers := provider.SanitizeHeaders(h)
		env = rules.Envelope(hook.Source, headers["x-event-type"], set.WebhookID, hook.TrustMode, false,
			"application/json", len(payload), headers, payload)
	}

	prog, err := rules.Compile(set.Rules, set.DefaultAction, set.Params)
	if err != nil {
		return TestRulesOut{}, ruleError(err)
	}
	d := prog.Evaluate(ctx, env)
	if !d.Drop && !d.Faulted && d.Queue == "" {
		d.Queue = set.TargetQueue
	}
	d.NameQueue(set.TargetQueue)
	return TestRulesOut{Decision: d, Trace: d.Trace, Envelope: env}, nil
}

func (s *Service) eventOf(ctx context.Context, endpoint, webhook string, id int64) (Event, error) {
	var ev Event
	raw, err := s.st.EventGet(ctx, endpoint, id, &webhook)
	err = decode(raw, err, &ev)
	return ev, err
}
