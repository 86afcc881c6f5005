package rules

import (
	"errors"
	"strings"

	"github.com/itchyny/gojq"
)

// ParamsVar is the only free variable a rule expression may use.
const ParamsVar = "$params"

// forbiddenFuncs are refused at save time (CONTRACT §6), by name and for any
// arity: they read the process environment, the clock or further inputs, or
// write to stderr / stop the process. The last few do not exist in gojq but
// belong to the same family in jq; naming them keeps the error precise.
var forbiddenFuncs = map[string]bool{
	"env":            true,
	"input":          true,
	"inputs":         true,
	"input_filename": true,
	"debug":          true,
	"stderr":         true,
	"halt":           true,
	"halt_error":     true,
	"now":            true,
	"localtime":      true,
	"strflocaltime":  true,
	// jq-only relatives.
	"input_line_number": true,
	"get_search_list":   true,
	"get_prog_origin":   true,
	"get_jq_origin":     true,
	"modulemeta":        true,
}

// scope is an immutable linked list of variable names bound inside the
// expression (as-bindings, reduce/foreach patterns, function $params).
type scope struct {
	name   string
	parent *scope
}

func (s *scope) with(names ...string) *scope {
	for _, n := range names {
		s = &scope{name: n, parent: s}
	}
	return s
}

func (s *scope) has(name string) bool {
	for ; s != nil; s = s.parent {
		if s.name == name {
			return true
		}
	}
	return false
}

// checker walks a parsed gojq AST and records the first violation.
type checker struct {
	where string
	err   *Error
}

func (c *checker) fail(code, format string, args ...any) {
	if c.err == nil {
		c.err = errorf(code, "%s: "+format, append([]any{c.where}, args...)...)
	}
}

// variable checks a reference to $name.
func (c *checker) variable(name string, s *scope) {
	switch {
	case name == "$ENV":
		c.fail(CodeForbiddenFunction, "%s is not allowed", name)
	case name == ParamsVar || s.has(name):
	default:
		if len(name) <= 32 && !strings.ContainsAny(name, "\n\r\t") {
			c.fail(CodeInvalidExpression, "unknown variable %s (only $params and variables bound in the expression)", name)
		} else {
			c.fail(CodeInvalidExpression, "unknown variable (only $params and variables bound in the expression)")
		}
	}
}

func (c *checker) query(q *gojq.Query, s *scope) {
	if q == nil || c.err != nil {
		return
	}
	for _, im := range q.Imports {
		if im.IncludePath != "" {
			c.fail(CodeForbiddenFunction, "include is not allowed")
		} else {
			c.fail(CodeForbiddenFunction, "import is not allowed")
		}
		return
	}
	for _, fd := range q.FuncDefs {
		inner := s
		for _, a := range fd.Args {
			if strings.HasPrefix(a, "$") {
				inner = inner.with(a)
			}
		}
		c.query(fd.Body, inner)
	}
	c.term(q.Term, s)
	if len(q.Patterns) > 0 {
		// <left> as <patterns> | <right>
		c.query(q.Left, s)
		inner := c.patterns(q.Patterns, s)
		c.query(q.Right, inner)
		return
	}
	c.query(q.Left, s)
	c.query(q.Right, s)
}

// patterns walks destructuring patterns (including ?// alternatives, which
// bind the union of their variables) and returns the extended scope.
func (c *checker) patterns(ps []*gojq.Pattern, s *scope) *scope {
	var names []string
	var collect func(p *gojq.Pattern)
	collect = func(p *gojq.Pattern) {
		if p == nil {
			return
		}
		if p.Name != "" {
			names = append(names, p.Name)
		}
		for _, e := range p.Array {
			collect(e)
		}
		for _, kv := range p.Object {
			if strings.HasPrefix(kv.Key, "$") {
				names = append(names, kv.Key)
			}
			collect(kv.Val)
		}
	}
	for _, p := range ps {
		collect(p)
	}
	inner := s.with(names...)
	// Key expressions inside object patterns; leniency here is fine, the
	// gojq compiler is the backstop for exact scoping.
	var keys func(p *gojq.Pattern)
	keys = func(p *gojq.Pattern) {
		if p == nil {
			return
		}
		for _, e := range p.Array {
			keys(e)
		}
		for _, kv := range p.Object {
			c.str(kv.KeyString, inner)
			c.query(kv.KeyQuery, inner)
			keys(kv.Val)
		}
	}
	for _, p := range ps {
		keys(p)
	}
	return inner
}

func (c *checker) str(st *gojq.String, s *scope) {
	if st == nil {
		return
	}
	for _, q := range st.Queries {
		c.query(q, s)
	}
}

func (c *checker) index(ix *gojq.Index, s *scope) {
	if ix == nil {
		return
	}
	c.str(ix.Str, s)
	c.query(ix.Start, s)
	c.query(ix.End, s)
}

func (c *checker) term(t *gojq.Term, s *scope) {
	if t == nil || c.err != nil {
		return
	}
	c.index(t.Index, s)
	if f := t.Func; f != nil {
		switch {
		case strings.HasPrefix(f.Name, "$"):
			c.variable(f.Name, s)
		case forbiddenFuncs[f.Name]:
			c.fail(CodeForbiddenFunction, "function %s is not allowed", f.Name)
		}
		for _, a := range f.Args {
			c.query(a, s)
		}
	}
	if o := t.Object; o != nil {
		for _, kv := range o.KeyVals {
			if strings.HasPrefix(kv.Key, "$") {
				c.variable(kv.Key, s)
			}
			c.str(kv.KeyString, s)
			c.query(kv.KeyQuery, s)
			c.query(kv.Val, s)
		}
	}
	if t.Array != nil {
		c.query(t.Array.Query, s)
	}
	if t.Unary != nil {
		c.term(t.Unary.Term, s)
	}
	c.str(t.Str, s)
	if i := t.If; i != nil {
		c.query(i.Cond, s)
		c.query(i.Then, s)
		for _, e := range i.Elif {
			c.query(e.Cond, s)
			c.query(e.Then, s)
		}
		c.query(i.Else, s)
	}
	if tr := t.Try; tr != nil {
		c.query(tr.Body, s)
		c.query(tr.Catch, s)
	}
	if r := t.Reduce; r != nil {
		c.query(r.Query, s)
		c.query(r.Start, s)
		inner := c.patterns(r.Patterns, s)
		c.query(r.Update, inner)
	}
	if f := t.Foreach; f != nil {
		c.query(f.Query, s)
		c.query(f.Start, s)
		inner := c.patterns(f.Patterns, s)
		c.query(f.Update, inner)
		c.query(f.Extract, inner)
	}
	if l := t.Label; l != nil {
		c.query(l.Body, s) // labels live in their own namespace
	}
	c.query(t.Query, s)
	for _, sf := range t.SuffixList {
		c.index(sf.Index, s)
	}
}

// compileExpr parses, checks and compiles one rule expression. where names
// the rule in error messages.
func compileExpr(expr, where string) (*gojq.Code, *Error) {
	q, err := gojq.Parse(expr)
	if err != nil {
		var pe *gojq.ParseError
		if errors.As(err, &pe) {
			return nil, errorf(CodeInvalidExpression, "%s: jq syntax error at byte %d", where, pe.Offset)
		}
		return nil, errorf(CodeInvalidExpression, "%s: jq syntax error", where)
	}
	c := &checker{where: where}
	c.query(q, nil)
	if c.err != nil {
		return nil, c.err
	}
	code, err := gojq.Compile(q, gojq.WithVariables([]string{ParamsVar}))
	if err != nil {
		return nil, errorf(CodeInvalidExpression, "%s: expression does not compile (unknown function, wrong arity or unbound name)", where)
	}
	return code, nil
}

// CheckExpr validates a single expression as Normalize would, for callers
// that edit one rule at a time.
func CheckExpr(expr string) error {
	if strings.TrimSpace(expr) == "" {
		return errorf(CodeInvalidRule, "expr is required")
	}
	if len(expr) > MaxExprLen {
		return errorf(CodeInvalidRule, "expr must be at most %d bytes", MaxExprLen)
	}
	if _, err := compileExpr(expr, "expr"); err != nil {
		return err
	}
	return nil
}
