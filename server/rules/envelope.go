package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// Envelope builds the jq input document of a delivery:
//
//	{source, kind, webhook_id, trust_mode, verified, content_type, size,
//	 headers (lower-cased names), payload (parsed JSON or null)}
//
// headers should already be sanitized (secrets redacted). Names that
// collide once lower-cased keep the value of the last name in sorted order.
// payload is parsed as JSON when it is JSON, else it is null. Numbers become
// int when they are integers that fit, *big.Int when they are larger
// integers, and float64 otherwise, so large ids keep their precision.
func Envelope(source, kind, webhookID, trustMode string, verified bool, contentType string, size int, headers map[string]string, payload []byte) any {
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	sort.Strings(names)
	h := make(map[string]any, len(headers))
	for _, name := range names {
		h[strings.ToLower(name)] = headers[name]
	}
	var body any
	if len(bytes.TrimSpace(payload)) > 0 {
		if v, err := decodeJSON(payload); err == nil {
			body = v
		}
	}
	return map[string]any{
		"source":       source,
		"kind":         kind,
		"webhook_id":   webhookID,
		"trust_mode":   trustMode,
		"verified":     verified,
		"content_type": contentType,
		"size":         size,
		"headers":      h,
		"payload":      body,
	}
}

// DecodeJSON decodes one JSON document into values gojq accepts
// (map[string]any, []any, string, bool, nil, int, float64, *big.Int).
// Use it to load stored params before Compile.
func DecodeJSON(b []byte) (any, error) { return decodeJSON(b) }

func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("rules: trailing data after JSON value")
	}
	return convertNumbers(v), nil
}

func convertNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		return convertNumber(v)
	case map[string]any:
		for k, e := range v {
			v[k] = convertNumbers(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = convertNumbers(e)
		}
		return v
	default:
		return v
	}
}

func convertNumber(n json.Number) any {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 0); err == nil {
			return int(i)
		}
		if b, ok := new(big.Int).SetString(s, 10); ok {
			return b
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && math.IsInf(f, 0) {
		if f > 0 {
			return math.MaxFloat64
		}
		return -math.MaxFloat64
	}
	return f
}
