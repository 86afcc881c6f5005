// Package safejson decides, in one pass over the bytes, whether a JSON text is one that
// Switchboard may store and hand to an agent: every strict decoder (go-sdk, JSON.parse, Python's
// json) must be able to read it back, and PostgreSQL's jsonb must be able to hold it.
//
// Refused (an error): nesting deeper than the limit, a number outside binary64's range (1e400
// overflows to infinity, 1e-400 underflows to zero), and a number literal longer than
// MaxNumberLen (jsonb's numeric has its own digit limits). Integers beyond 2^53 are accepted:
// every decoder reads them, a binary64 one rounds them, jsonb keeps them exactly.
//
// Repaired (Report.Unstorable, then Sanitize): text jsonb cannot hold — the escape \u0000, an
// unpaired surrogate escape such as \ud800, and bytes that are not UTF-8 — becomes U+FFFD.
package safejson

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

const (
	// MaxDepth is the deepest nesting of arrays and objects accepted (a scalar is depth 0,
	// [1] depth 1).
	MaxDepth = 64
	// MaxNumberLen bounds one number literal, in bytes.
	MaxNumberLen = 1024
	maxStack     = 128
)

// Refusals. Their texts are the one-line reasons given to senders and agents.
var (
	ErrTooDeep     = errors.New("JSON nested deeper than 64 levels")
	ErrNumberRange = errors.New("JSON number outside the range of a 64-bit float")
	ErrNumberLong  = errors.New("JSON number literal longer than 1024 bytes")
)

// Report is what Scan learnt about acceptable bytes.
type Report struct {
	// JSON: the bytes are exactly one JSON text (surrounding whitespace allowed).
	JSON bool
	// Unstorable: a string holds text jsonb cannot (see the package comment); Sanitize repairs it.
	Unstorable bool
}

// Scan checks b with the default depth limit. A syntax error is not an error: Report.JSON is
// false. An error means b is JSON-shaped but breaks a limit.
func Scan(b []byte) (Report, error) { return ScanDepth(b, MaxDepth) }

// ScanDepth is Scan with another depth limit, at most 128 (e.g. MaxDepth+1 for values wrapped
// in one object of arguments).
func ScanDepth(b []byte, maxDepth int) (Report, error) {
	maxDepth = min(maxDepth, maxStack)
	s := scanner{b: b}
	var objects [maxStack]bool // objects[d]: the container at depth d+1 is an object
	depth := 0
	s.ws()
	for {
		// A value is expected at s.i.
		if s.i >= len(b) {
			return Report{}, nil
		}
		switch c := b[s.i]; {
		case c == '{' || c == '[':
			if depth == maxDepth {
				return Report{}, ErrTooDeep
			}
			objects[depth] = c == '{'
			depth++
			s.i++
			s.ws()
			if s.i < len(b) && (b[s.i] == '}' && c == '{' || b[s.i] == ']' && c == '[') {
				s.i++
				depth--
				break // an empty container is a complete value
			}
			if c == '{' && !s.key() {
				return Report{}, nil
			}
			continue
		case c == '"':
			if !s.str() {
				return Report{}, nil
			}
		case c == '-' || c >= '0' && c <= '9':
			ok, err := s.num()
			if err != nil || !ok {
				return Report{}, err
			}
		default:
			if !s.literal() {
				return Report{}, nil
			}
		}
		// A value ended: close containers, or move to the next member.
		for {
			s.ws()
			if depth == 0 {
				return Report{JSON: s.i == len(b), Unstorable: s.unstorable && s.i == len(b)}, nil
			}
			if s.i >= len(b) {
				return Report{}, nil
			}
			obj := objects[depth-1]
			c := b[s.i]
			if c == '}' && obj || c == ']' && !obj {
				s.i++
				depth--
				continue
			}
			if c != ',' {
				return Report{}, nil
			}
			s.i++
			s.ws()
			if obj && !s.key() {
				return Report{}, nil
			}
			break
		}
	}
}

type scanner struct {
	b          []byte
	i          int
	unstorable bool
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// key reads `"name" :` and the whitespace after it.
func (s *scanner) key() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' || !s.str() {
		return false
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return false
	}
	s.i++
	s.ws()
	return true
}

func (s *scanner) literal() bool {
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
			s.i += len(lit)
			return true
		}
	}
	return false
}

// str reads a string starting at its opening quote, noting text jsonb cannot hold.
func (s *scanner) str() bool {
	b := s.b
	i := s.i + 1
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hex4(b, i+2)
				if !ok {
					return false
				}
				i += 6
				switch {
				case r == 0:
					s.unstorable = true
				case r >= 0xd800 && r < 0xdc00: // high surrogate: a low one must follow
					if lo, ok := escapeAt(b, i); ok && lo >= 0xdc00 && lo < 0xe000 {
						i += 6
					} else {
						s.unstorable = true
					}
				case r >= 0xdc00 && r < 0xe000:
					s.unstorable = true
				}
			default:
				return false
			}
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				s.unstorable = true
			}
			i += n
		}
	}
	return false
}

// escapeAt reads a \uXXXX escape at b[i:].
func escapeAt(b []byte, i int) (rune, bool) {
	if i+1 >= len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	return hex4(b, i+2)
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// num reads a number; ok is false on a syntax error.
func (s *scanner) num() (ok bool, err error) {
	b := s.b
	start, i := s.i, s.i
	if b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	intStart := i
	n := digits()
	if n == 0 || n > 1 && b[intStart] == '0' {
		return false, nil
	}
	simple := true
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false, nil
		}
		simple = false
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false, nil
		}
		simple = false
	}
	s.i = i
	lit := b[start:i]
	if len(lit) > MaxNumberLen {
		return true, ErrNumberLong
	}
	if simple && n <= 300 {
		return true, nil // an integer below 1e300: the hot path, no parsing
	}
	f, perr := strconv.ParseFloat(string(lit), 64)
	if perr != nil { // only ErrRange is possible here: the syntax was checked above
		return true, ErrNumberRange
	}
	if f == 0 {
		for _, c := range lit {
			if c >= '1' && c <= '9' {
				return true, ErrNumberRange // underflowed to zero
			}
			if c == 'e' || c == 'E' {
				break
			}
		}
	}
	return true, nil
}

// Sanitize returns a copy of a JSON text (one Scan accepted) with every piece of text jsonb
// cannot hold replaced by U+FFFD: the escape \u0000, an unpaired surrogate escape, and each
// byte that is not UTF-8. Everything else is kept byte for byte.
func Sanitize(b []byte) []byte {
	out := make([]byte, 0, len(b)+16)
	in := false
	for i := 0; i < len(b); {
		c := b[i]
		if !in {
			out = append(out, c)
			in = c == '"'
			i++
			continue
		}
		switch {
		case c == '"':
			out = append(out, c)
			in = false
			i++
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			r, _ := hex4(b, i+2)
			switch {
			case r == 0, r >= 0xdc00 && r < 0xe000:
				out = append(out, `\ufffd`...)
				i += 6
			case r >= 0xd800 && r < 0xdc00:
				if lo, ok := escapeAt(b, i+6); ok && lo >= 0xdc00 && lo < 0xe000 {
					out = append(out, b[i:i+12]...)
					i += 12
				} else {
					out = append(out, `\ufffd`...)
					i += 6
				}
			default:
				out = append(out, b[i:i+6]...)
				i += 6
			}
		case c == '\\':
			out = append(out, b[i:i+2]...)
			i += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				out = append(out, "\uFFFD"...)
			} else {
				out = append(out, b[i:i+n]...)
			}
			i += n
		}
	}
	return out
}

// SanitizeText repairs plain text (a body that is not JSON) for a PostgreSQL text or jsonb
// string: NUL and bytes that are not UTF-8 become U+FFFD. changed reports whether it did.
func SanitizeText(s string) (out string, changed bool) {
	ok := utf8.ValidString(s)
	if ok {
		for i := 0; i < len(s); i++ {
			if s[i] == 0 {
				ok = false
				break
			}
		}
	}
	if ok {
		return s, false
	}
	buf := make([]rune, 0, len(s))
	for _, r := range s { // ranging replaces each invalid byte with utf8.RuneError
		if r == 0 {
			r = utf8.RuneError
		}
		buf = append(buf, r)
	}
	return string(buf), true
}
