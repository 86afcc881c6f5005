package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/itchyny/gojq"
)

// Evaluation limits (CONTRACT §6).
const (
	RuleLimit     = 50 * time.Millisecond
	DeliveryLimit = 250 * time.Millisecond

	// hardStopGrace is how long past a deadline Evaluate waits for gojq to
	// notice the cancelled context before it abandons the evaluation.
	hardStopGrace = 10 * time.Millisecond
	// maxRunaway bounds, process-wide, evaluations abandoned inside a single
	// long gojq step (one opcode, e.g. a huge comparison or tojson) that are
	// still burning CPU. Per Program at most one may be in flight: while it
	// runs, further evaluations of that Program fault at once with cause
	// "budget", so one bad list cannot pile up work. At the global bound every
	// evaluation faults that way.
	maxRunaway = 16
	// maxCauseLen bounds the error text kept in a fault trace.
	maxCauseLen = 160
)

// Dispositions.
const (
	DispositionRouted  = "routed"
	DispositionDropped = "dropped"
	DispositionFaulted = "faulted"
	DispositionDefault = "default"
)

// Trace stages.
const (
	StageRule    = "rule"
	StageDefault = "default"
	StageFault   = "fault"
)

// Trace explains a Decision; it is stored on the event and each todo.
type Trace struct {
	Stage     string  `json:"stage"`           // "rule" | "default" | "fault"
	Cause     string  `json:"cause,omitempty"` // for faults: "timeout", "budget", "canceled", "error: <short>"
	RuleIndex *int    `json:"rule_index,omitempty"`
	RuleID    string  `json:"rule_id,omitempty"`
	RuleName  string  `json:"rule_name,omitempty"`
	Action    *Action `json:"action,omitempty"`
}

// Decision is the outcome of evaluating a rule list on one delivery.
type Decision struct {
	Drop        bool     `json:"drop"`
	Queue       string   `json:"queue,omitempty"`     // "" means: the webhook's own target queue
	Endpoints   []string `json:"endpoints,omitempty"` // nil means: every target
	Disposition string   `json:"disposition"`         // "routed" | "dropped" | "faulted" | "default"
	Faulted     bool     `json:"faulted"`
	Trace       Trace    `json:"-"`
}

// NameQueue writes the webhook's own queue into the trace where neither a rule nor a default
// action named one (no rules, or no match and no default action), so a stored trace always says
// where the delivery went.
func (d *Decision) NameQueue(target string) {
	if d.Trace.Stage == StageDefault && (d.Trace.Action == nil || d.Trace.Action.Queue == "" && !d.Trace.Action.Drop) {
		d.Trace.Action = &Action{Queue: target}
	}
}

type compiledRule struct {
	id, name string
	code     *gojq.Code
	action   Action
}

// Program is a compiled rule list. It is immutable and safe for concurrent
// use: compile once per saved list and reuse it across deliveries.
type Program struct {
	rules  []compiledRule
	def    *Action
	params any

	ruleLimit, deliveryLimit time.Duration

	runaway      atomic.Int32 // abandoned evaluations of this Program still running
	runawayIndex atomic.Int32 // rule index of the last abandoned evaluation
}

// Len reports the number of rules.
func (p *Program) Len() int {
	if p == nil {
		return 0
	}
	return len(p.rules)
}

// Compile compiles a (normally already Normalize-d) list. It re-checks every
// expression and action, so a list that would not pass Normalize does not
// compile either. params may be nil; it is copied into gojq-compatible
// values (json.Number and other JSON-marshalable types are accepted).
func Compile(rules []Rule, def *Action, params map[string]any) (*Program, error) {
	if len(rules) > MaxRules {
		return nil, errorf(CodeTooManyRules, "a webhook has at most %d rules", MaxRules)
	}
	p := &Program{
		rules:         make([]compiledRule, 0, len(rules)),
		ruleLimit:     RuleLimit,
		deliveryLimit: DeliveryLimit,
	}
	ids := make(map[string]bool, len(rules))
	for i, r := range rules {
		if !validID(r.ID) {
			return nil, errorf(CodeInvalidRule, "rule %d: id must be 1-64 characters of A-Z a-z 0-9 _ -", i)
		}
		if ids[r.ID] {
			return nil, errorf(CodeInvalidRule, "rule %d: duplicate id %s", i, r.ID)
		}
		ids[r.ID] = true
		where := fmt.Sprintf("rule %d (id %s)", i, r.ID)
		act, err := normalizeAction(r.Action, where)
		if err != nil {
			return nil, err
		}
		code, cerr := compileExpr(r.Expr, where)
		if cerr != nil {
			return nil, cerr
		}
		p.rules = append(p.rules, compiledRule{id: r.ID, name: r.Name, code: code, action: act})
	}
	if def != nil {
		act, err := normalizeAction(*def, "default_action")
		if err != nil {
			return nil, err
		}
		p.def = &act
	}
	p.params = map[string]any{}
	if len(params) > 0 {
		b, err := json.Marshal(params)
		if err != nil {
			return nil, errorf(CodeInvalidParams, "params must be a JSON object of at most 16 KiB")
		}
		v, err := decodeJSON(b)
		if err != nil {
			return nil, errorf(CodeInvalidParams, "params must be a JSON object of at most 16 KiB")
		}
		p.params = v
	}
	return p, nil
}

// runaway counts abandoned evaluations whose goroutine has not returned yet.
var runaway atomic.Int64

// Abandoned reports how many abandoned evaluations are still running (for
// metrics and tests).
func Abandoned() int64 { return runaway.Load() }

const (
	stateRunning int32 = iota
	stateFinished
	stateAbandoned
)

// run is one evaluation: the state shared between Evaluate and its worker
// goroutine, and the context.Context the rules run under.
//
// A timeout ends the evaluation (fail closed), so a single Done channel
// serves every rule: it closes once the current rule's deadline passes or
// the caller's context is done. Moving to the next rule only stores a later
// deadline; the one timer re-arms itself lazily when it fires early. This
// keeps per-rule overhead to a clock read and two atomic stores.
type run struct {
	parent  context.Context
	overall time.Time // delivery deadline: min(start+limit, caller's deadline)

	cur       atomic.Int32 // index of the rule being evaluated, -1 before the first
	deadlines []int64      // per-rule deadline (unix ns), written before cur is stored
	state     atomic.Int32
	result    chan Decision

	deadline  atomic.Int64 // current deadline (unix ns)
	done      chan struct{}
	closeOnce sync.Once
	err       error // set before done is closed
	timer     *time.Timer
	stopAfter func() bool
}

func (r *run) Deadline() (time.Time, bool) { return time.Unix(0, r.deadline.Load()), true }
func (r *run) Done() <-chan struct{}       { return r.done }
func (r *run) Value(key any) any           { return r.parent.Value(key) }
func (r *run) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

func (r *run) stop(err error) {
	r.closeOnce.Do(func() {
		r.err = err
		close(r.done)
	})
}

// fire is the timer callback.
func (r *run) fire() {
	now := time.Now().UnixNano()
	if d := r.deadline.Load(); now < d {
		r.timer.Reset(time.Duration(d - now))
		return
	}
	r.stop(context.DeadlineExceeded)
}

// stopCause names why an evaluation stopped: "canceled" when the caller
// cancelled, "budget" once the delivery deadline has passed, else "timeout"
// (the rule's own limit). The clock is read directly rather than trusting
// which timer happened to fire first.
func (r *run) stopCause() string {
	if errors.Is(r.parent.Err(), context.Canceled) {
		return "canceled"
	}
	if !time.Now().Before(r.overall) {
		return "budget"
	}
	return "timeout"
}

// Evaluate runs the rules in order on envelope. A rule matches when its
// first output is neither false nor null; the first match wins; no match
// falls back to the default action, or to the webhook's own queue on every
// target. Each rule gets at most 50 ms and the whole list 250 ms (or less if
// ctx has an earlier deadline). Any runtime error, timeout or cancellation
// fails closed with a faulted Decision.
//
// The rules run on a worker goroutine. gojq checks the context between
// steps; should a single step outlive its deadline, Evaluate returns the
// fault anyway (about 10 ms late) and leaves the worker to finish alone.
func (p *Program) Evaluate(ctx context.Context, envelope any) Decision {
	if p == nil || len(p.rules) == 0 {
		return p.fallback()
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if p.runaway.Load() > 0 || runaway.Load() >= maxRunaway {
		return p.fault(int(p.runawayIndex.Load()), "budget")
	}
	start := time.Now()
	r := &run{
		parent:    ctx,
		overall:   start.Add(p.deliveryLimit),
		deadlines: make([]int64, len(p.rules)),
		result:    make(chan Decision, 1),
		done:      make(chan struct{}),
	}
	if d, ok := ctx.Deadline(); ok && d.Before(r.overall) {
		r.overall = d
	}
	first := start.Add(p.ruleLimit)
	if r.overall.Before(first) {
		first = r.overall
	}
	r.cur.Store(-1)
	r.deadline.Store(first.UnixNano())
	r.timer = time.AfterFunc(first.Sub(start), r.fire)
	r.stopAfter = context.AfterFunc(ctx, func() { r.stop(ctx.Err()) })
	go func() {
		d := p.work(envelope, r)
		r.timer.Stop()
		r.stopAfter()
		if !r.state.CompareAndSwap(stateRunning, stateFinished) {
			p.runaway.Add(-1)
			runaway.Add(-1)
		}
		r.result <- d
	}()

	select {
	case d := <-r.result:
		return d
	case <-r.done:
	}
	// A deadline passed or the caller is gone. gojq notices at its next
	// step; give it a moment, then abandon a worker stuck inside one step.
	grace := time.NewTimer(hardStopGrace)
	defer grace.Stop()
	select {
	case d := <-r.result:
		return d
	case <-grace.C:
	}
	if !r.state.CompareAndSwap(stateRunning, stateAbandoned) {
		return <-r.result // finished just now
	}
	i := max(int(r.cur.Load()), 0)
	p.runawayIndex.Store(int32(i))
	p.runaway.Add(1)
	runaway.Add(1)
	return p.fault(i, r.stopCause())
}

// work evaluates the rules; it runs on the worker goroutine.
func (p *Program) work(envelope any, r *run) Decision {
	for i := range p.rules {
		if r.Err() != nil {
			return p.fault(i, r.stopCause())
		}
		deadline := time.Now().Add(p.ruleLimit)
		if r.overall.Before(deadline) {
			deadline = r.overall
		}
		r.deadlines[i] = deadline.UnixNano()
		r.deadline.Store(r.deadlines[i])
		r.cur.Store(int32(i))
		matched, cause := runRule(r, p.rules[i].code, envelope, p.params)
		if cause == "timeout" {
			return p.fault(i, r.stopCause())
		}
		if cause != "" {
			return p.fault(i, cause)
		}
		if matched {
			return p.matched(i)
		}
	}
	return p.fallback()
}

// runRule returns whether the first output is truthy, or a fault cause.
func runRule(ctx context.Context, code *gojq.Code, envelope, params any) (matched bool, cause string) {
	defer func() {
		if recover() != nil {
			matched, cause = false, "error: internal"
		}
	}()
	v, ok := code.RunWithContext(ctx, envelope, params).Next()
	if !ok {
		return false, ""
	}
	if err, isErr := v.(error); isErr {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return false, "timeout"
		}
		return false, "error: " + shortError(err)
	}
	return v != nil && v != false, ""
}

// shortError renders a gojq runtime error briefly. error(v) with a
// non-string v is not rendered: marshalling v could itself be unbounded.
func shortError(err error) string {
	var msg string
	var ve gojq.ValueError
	if errors.As(err, &ve) {
		s, ok := ve.Value().(string)
		if !ok {
			return "error raised with a non-string value"
		}
		msg = s
	} else {
		msg = err.Error()
	}
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > maxCauseLen {
		cut := maxCauseLen
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	if !utf8.ValidString(msg) {
		msg = strings.ToValidUTF8(msg, "?")
	}
	if msg == "" {
		msg = "empty error"
	}
	return msg
}

func (p *Program) fault(i int, cause string) Decision {
	idx := i
	r := p.rules[i]
	return Decision{
		Faulted:     true,
		Disposition: DispositionFaulted,
		Trace: Trace{
			Stage:     StageFault,
			Cause:     cause,
			RuleIndex: &idx,
			RuleID:    r.id,
			RuleName:  r.name,
		},
	}
}

func (p *Program) matched(i int) Decision {
	idx := i
	r := p.rules[i]
	act := r.action.clone()
	d := decide(act, DispositionRouted)
	d.Trace = Trace{Stage: StageRule, RuleIndex: &idx, RuleID: r.id, RuleName: r.name, Action: &act}
	return d
}

func (p *Program) fallback() Decision {
	act := Action{}
	if p != nil && p.def != nil {
		act = p.def.clone()
	}
	d := decide(act, DispositionDefault)
	d.Trace = Trace{Stage: StageDefault, Action: &act}
	return d
}

func decide(a Action, disposition string) Decision {
	if a.Drop {
		return Decision{Drop: true, Disposition: DispositionDropped}
	}
	return Decision{Queue: a.Queue, Endpoints: a.clone().Endpoints, Disposition: disposition}
}
