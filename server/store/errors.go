package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// Wire codes of contract §4.3. A tool failure is reported as "<code>: <message>".
const (
	CodeInvalidArgument     = "invalid_argument"
	CodeForbidden           = "forbidden"
	CodeNotFound            = "not_found"
	CodeConflict            = "conflict"
	CodeCeilingExceeded     = "ceiling_exceeded"
	CodeForbiddenSourceType = "forbidden_source_type"
	CodeRateLimited         = "rate_limited"
	CodeInternal            = "internal"
	CodeRuleNotFound        = "rule_not_found"
	CodeInvalidExpression   = "invalid_expression"
	CodeForbiddenFunction   = "forbidden_function"
	CodeInvalidRule         = "invalid_rule"
	CodeTooManyRules        = "too_many_rules"
	CodeInvalidParams       = "invalid_params"
	// CodeNoTargets is the ingest refusal "no live target" (HTTP 503), never a tool error.
	CodeNoTargets = "no_targets"
	// CodeStale tells the webhook receiver that the rules it routed with changed since it read
	// them: it reads the webhook again. Never on the wire.
	CodeStale = "stale"
)

// sqlstates mirrors the table switchboard.error_codes: the SQLSTATEs our functions raise, by
// wire code. TestErrorCodesMatchDatabase keeps the two in step.
var sqlstates = map[string]string{
	"SB400": CodeInvalidArgument,
	"SB403": CodeForbidden,
	"SB404": CodeNotFound,
	"SB409": CodeConflict,
	"SB421": CodeCeilingExceeded,
	"SB422": CodeForbiddenSourceType,
	"SB441": CodeRuleNotFound,
	"SB442": CodeInvalidExpression,
	"SB443": CodeForbiddenFunction,
	"SB444": CodeInvalidRule,
	"SB445": CodeTooManyRules,
	"SB446": CodeInvalidParams,
	"SB503": CodeNoTargets,
	"SB412": CodeStale,
}

// internalMessage is all a client ever learns about an unexpected failure.
const internalMessage = "internal error"

// Error is a failure with a wire code and a short, fixed, secret-free message. For code
// internal the message is generic and the cause (kept for the server log) is never shown.
type Error struct {
	Code    string
	Message string
	cause   error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap gives the cause of an internal error (for logging), nil otherwise.
func (e *Error) Unwrap() error { return e.cause }

// Errorf builds a domain error with a fixed message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Internal wraps an unexpected failure: code internal, generic message, cause kept.
func Internal(cause error) *Error {
	return &Error{Code: CodeInternal, Message: internalMessage, cause: cause}
}

// Classify is the one place that maps an error to a wire code. Our SQLSTATEs (class SB) carry a
// fixed message written in SQL, which passes through unchanged; anything else is internal.
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if code, ok := sqlstates[pgErr.Code]; ok {
			return &Error{Code: code, Message: pgErr.Message}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: CodeInternal, Message: "request cancelled or timed out", cause: err}
	}
	return Internal(err)
}

// SQLStates returns a copy of the SQLSTATE → wire code table (for tests and docs).
func SQLStates() map[string]string {
	m := make(map[string]string, len(sqlstates))
	for k, v := range sqlstates {
		m[k] = v
	}
	return m
}

// Unavailable reports whether err is an outage rather than a bug: the database could not be
// reached, the connection broke, or the server ended the session or refused one (SQLSTATE
// classes 08 and 53, 57P01-57P03). Callers answer it 503 with Retry-After.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || strings.HasPrefix(c, "53") || strings.HasPrefix(c, "57P0")
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, puddle.ErrClosedPool)
}
