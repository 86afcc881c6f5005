package provider

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Size limits for extracted text. Delivery ids become part of an indexed idempotency key, so an
// oversized one is refused (Verdict.BadDeliveryID); titles are for humans.
const (
	maxDeliveryID = 256
	maxEventType  = 256
	maxTitle      = 200
	maxTitlePart  = 120 // leaves room for the rest of a composed title
)

// object is a JSON object whose members are decoded lazily. Lookups are exact-key, unlike
// encoding/json's case-insensitive struct matching, so "ID" never stands in for "id".
type object map[string]json.RawMessage

// parseObject accepts only a JSON object; null, arrays, scalars and syntax errors all fail.
func parseObject(b []byte) (object, bool) {
	var o object
	if err := json.Unmarshal(b, &o); err != nil || o == nil {
		return nil, false
	}
	return o, true
}

// str returns a string member; ok is false when absent or not a string (null counts as absent).
func (o object) str(key string) (string, bool) {
	raw, found := o[key]
	var s string
	if !found || string(raw) == "null" || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// obj returns a nested object, or nil (which still answers lookups) when it is not one.
func (o object) obj(key string) object {
	raw, found := o[key]
	if !found {
		return nil
	}
	inner, _ := parseObject(raw)
	return inner
}

// digits returns a raw JSON value that is a plain non-negative integer, as its digits.
func digits(raw json.RawMessage) string {
	if len(raw) == 0 || len(raw) > 20 {
		return ""
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return ""
		}
	}
	return string(raw)
}

// usableID keeps a delivery id only if it can serve in an idempotency key: at most 256 bytes,
// valid UTF-8 and free of control characters. An empty one is no id ("": use the body hash);
// one that is present but unusable is bad, and the receiver refuses the delivery (422) rather
// than fall back to the body hash, which would merge two deliveries that share a body.
func usableID(s string) (id string, bad bool) {
	if s == "" {
		return "", false
	}
	if len(s) > maxDeliveryID || !utf8.ValidString(s) {
		return "", true
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "", true
		}
	}
	return s, false
}

// clean makes text safe to store and show on one line: valid UTF-8, every control character
// (CR and LF included) turned into a space, trimmed, and cut to max bytes on a rune boundary.
func clean(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = strings.TrimSpace(s[:cut])
	}
	return s
}

func cleanEvent(s string) string { return clean(s, maxEventType) }

// join builds "<head> <word>", degrading to "<head>" when the word is unknown.
func join(head, word string) string {
	if word == "" {
		return clean(head, maxTitle)
	}
	return clean(head+" "+clean(word, maxTitlePart), maxTitle)
}

func generic(event string) string {
	if event == "" {
		return "generic delivery"
	}
	return clean("generic delivery: "+clean(event, maxTitlePart), maxTitle)
}

// forgeFields are the members a forge title needs. Decoding into them skips every other member
// without copying it, where a map of raw members would copy the whole body (a 20 MiB push, 20 MiB
// more). encoding/json falls back to a case-insensitive match when no exact key exists; for a
// title that is harmless, which is why no delivery id is read this way.
type forgeFields struct {
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Number      json.RawMessage `json:"number"`
	PullRequest struct {
		Number json.RawMessage `json:"number"`
	} `json:"pull_request"`
	Issue struct {
		Number json.RawMessage `json:"number"`
	} `json:"issue"`
}

// forgeTitle is "<source> <event>: <owner/repo>[ #<n>]" for github and gitea.
func forgeTitle(source, event string, rawBody []byte) string {
	title := join(source, event)
	var body forgeFields
	// A member of the wrong type is skipped and the rest still decoded, so the error only
	// matters when the body is not JSON at all.
	var syntax *json.SyntaxError
	if err := json.Unmarshal(rawBody, &body); errors.As(err, &syntax) {
		// Both forges can post application/x-www-form-urlencoded with the JSON in "payload".
		if form, err := url.ParseQuery(string(rawBody)); err == nil {
			_ = json.Unmarshal([]byte(form.Get("payload")), &body)
		}
	}
	subject := clean(body.Repository.FullName, maxTitlePart)
	if event == "pull_request" || event == "issues" {
		n := digits(body.Number)
		if n == "" {
			n = digits(body.PullRequest.Number)
		}
		if n == "" {
			n = digits(body.Issue.Number)
		}
		if n != "" {
			subject = strings.TrimSpace(subject + " #" + n)
		}
	}
	if subject == "" {
		return title
	}
	return clean(title+": "+subject, maxTitle)
}

// cairnTitle is "cairn <kind>: <title> (<share type>)", dropping whatever parts are missing.
func cairnTitle(kind string, body object) string {
	title := join("cairn", kind)
	name, _ := body.str("title")
	if name = clean(name, maxTitlePart); name != "" {
		title += ": " + name
	}
	share, _ := body.str("share_type")
	if share == "" {
		share, _ = body.obj("share").str("type")
	}
	if share = clean(share, 40); share != "" {
		title += " (" + share + ")"
	}
	return clean(title, maxTitle)
}
