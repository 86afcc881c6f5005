package provider

import (
	"net/http"
	"sort"
	"strings"
)

// Redacted replaces the value of every secret-bearing header before it is stored or logged.
const Redacted = "[redacted]"

// secretHeaders are the signature, token and secret headers the contract names, plus the
// obvious relatives (proxy credentials, cookies set by a proxy in between).
var secretHeaders = map[string]bool{
	"x-hub-signature":     true,
	"x-hub-signature-256": true,
	"x-gitea-signature":   true,
	"stripe-signature":    true,
	"x-slack-signature":   true,
	"x-cairn-signature":   true,
	"webhook-signature":   true,
	"authorization":       true,
	"cookie":              true,
	"x-api-key":           true,
	"proxy-authorization": true,
	"set-cookie":          true,
}

// secretWords catch credential headers no list can foresee (x-gitlab-token, webhook-signature,
// x-webhook-secret…): redacting one header too many costs nothing, one too few leaks a secret.
var secretWords = []string{"signature", "secret", "token", "password", "api-key", "apikey"}

func isSecretHeader(lower string) bool {
	if secretHeaders[lower] {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// SanitizeHeaders returns lower-cased header names -> value (multiple values joined with ", "),
// with every secret-bearing header replaced by Redacted. Names differing only in case merge.
func SanitizeHeaders(h http.Header) map[string]string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names) // a stable merge order for names that differ only in case
	out := make(map[string]string, len(h))
	for _, k := range names {
		lower := strings.ToLower(k)
		if isSecretHeader(lower) {
			out[lower] = Redacted
			continue
		}
		v := strings.Join(h[k], ", ")
		if prev, ok := out[lower]; ok {
			v = prev + ", " + v
		}
		out[lower] = v
	}
	return out
}
