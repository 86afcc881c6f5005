package safejson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, c := range []struct {
		in        string
		json, bad bool
		err       error
	}{
		{in: `{}`, json: true},
		{in: ` [1, 2.5, -0.1e3, "x", true, false, null, {"a": {"b": []}}] `, json: true},
		{in: `{"a":1,}`},
		{in: `[1 2]`},
		{in: `{"a" 1}`},
		{in: `01`},
		{in: `1.`},
		{in: `-`},
		{in: `"abc`},
		{in: `"a\x"`},
		{in: `nul`},
		{in: `{} x`},
		{in: "\"a\tb\""},
		{in: `plain text`},
		{in: deep(64), json: true},
		{in: deep(65), err: ErrTooDeep},
		{in: `{"a":` + deep(63) + `}`, json: true},
		{in: `{"a":` + deep(64) + `}`, err: ErrTooDeep},
		{in: deep(10000), err: ErrTooDeep},
		{in: `1e308`, json: true},
		{in: `1e400`, err: ErrNumberRange},
		{in: `[-1.8e308]`, err: ErrNumberRange},
		{in: `1e-400`, err: ErrNumberRange},
		{in: `0e-400`, json: true},
		{in: `0.0000e99999`, json: true},
		{in: `5e-324`, json: true},
		{in: `9007199254740993`, json: true},
		{in: strings.Repeat("9", 400), err: ErrNumberRange},
		{in: "1." + strings.Repeat("0", 2000), err: ErrNumberLong},
		{in: `"a\u0000b"`, json: true, bad: true},
		{in: `"\ud800"`, json: true, bad: true},
		{in: `"\udc00x"`, json: true, bad: true},
		{in: `"\ud800\u0041"`, json: true, bad: true},
		{in: `"\ud83d\ude00"`, json: true},
		{in: `"\uD83D\uDE00 \u00e9 \u0001"`, json: true},
		{in: "\"\xff\"", json: true, bad: true},
		{in: "\"\xed\xa0\x80\"", json: true, bad: true}, // a surrogate encoded in UTF-8
		{in: `{"\u0000":1}`, json: true, bad: true},
		{in: `"\u00zz"`},
	} {
		r, err := Scan([]byte(c.in))
		name := c.in
		if len(name) > 40 {
			name = name[:40]
		}
		if !errors.Is(err, c.err) || r.JSON != c.json || r.Unstorable != c.bad {
			t.Errorf("%q: got %+v %v, want json=%v unstorable=%v %v", name, r, err, c.json, c.bad, c.err)
		}
		if err == nil && r.JSON != json.Valid([]byte(c.in)) && !strings.Contains(c.in, "\xed") {
			t.Errorf("%q: JSON=%v, json.Valid disagrees", name, r.JSON)
		}
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		`{"t":"a\u0000b","n":1}`:             `{"t":"a\ufffdb","n":1}`,
		`["\ud800","\ud83d\ude00","\udc00"]`: `["\ufffd","\ud83d\ude00","\ufffd"]`,
		`"\ud800\u0041"`:                     `"\ufffd\u0041"`,
		"\"x\xffy\"":                         "\"x\uFFFDy\"",
		`{"\\u0000":"\\"}`:                   `{"\\u0000":"\\"}`,
	} {
		got := Sanitize([]byte(in))
		if string(got) != want {
			t.Errorf("Sanitize(%s) = %s, want %s", in, got, want)
		}
		if r, err := Scan(got); err != nil || !r.JSON || r.Unstorable {
			t.Errorf("Sanitize(%s) = %s: still %+v %v", in, got, r, err)
		}
	}
	if s, ch := SanitizeText("a\x00b\xffc"); !ch || s != "a\uFFFDb\uFFFDc" {
		t.Errorf("SanitizeText: %q %v", s, ch)
	}
	if s, ch := SanitizeText("plain é"); ch || s != "plain é" {
		t.Errorf("SanitizeText: %q %v", s, ch)
	}
}

// FuzzScan: Scan agrees with encoding/json on syntax (within the limits), and Sanitize's output
// always scans clean.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":"\u0000"}]}`, `"\ud800"`, `1e400`, `[[[]]]`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Scan(b)
		if err != nil {
			return
		}
		if r.JSON != json.Valid(b) && !bytes.Contains(b, []byte("\xed")) {
			t.Fatalf("JSON=%v, json.Valid=%v", r.JSON, json.Valid(b))
		}
		if r.Unstorable {
			if r2, err := Scan(Sanitize(b)); err != nil || !r2.JSON || r2.Unstorable {
				t.Fatalf("sanitized still %+v %v", r2, err)
			}
		}
	})
}

func body(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < size-64; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"id":12345678,"name":"item \u00e9 text","score":-12.5e3,"ok":true,"tags":["a","b"]}`)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func benchScan(b *testing.B, size int) {
	in := body(size)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if r, err := Scan(in); err != nil || !r.JSON {
			b.Fatal(r, err)
		}
	}
}

func benchValid(b *testing.B, size int) {
	in := body(size)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if !json.Valid(in) {
			b.Fatal()
		}
	}
}

func BenchmarkScan1KiB(b *testing.B)      { benchScan(b, 1<<10) }
func BenchmarkScan5MiB(b *testing.B)      { benchScan(b, 5<<20) }
func BenchmarkJSONValid1KiB(b *testing.B) { benchValid(b, 1<<10) }
func BenchmarkJSONValid5MiB(b *testing.B) { benchValid(b, 5<<20) }
