package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Codes the HTTP layer adds to fleet's: neither comes from a use case.
const (
	CodeMethodNotAllowed fleet.Code = "method_not_allowed"
	CodeInternal         fleet.Code = "internal"
)

// ErrorBody is the one error shape of the API:
// {"error": {"code", "message", "field"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what went wrong: a code clients branch on, a sentence for
// people and, when one field is at fault, its JSON path (or the header or
// query parameter).
type ErrorDetail struct {
	Code    fleet.Code `json:"code"`
	Message string     `json:"message"`
	Field   string     `json:"field,omitempty"`
}

// Error is an answer of the API other than success, or a request that got
// no answer (Status 0, Code unavailable, the cause in Err). Callers branch
// on it with errors.As, or with errors.Is against the sentinels below,
// which match by code.
type Error struct {
	Status  int
	Code    fleet.Code
	Message string
	Field   string
	// Wait is the server's Retry-After, when it sent one.
	Wait time.Duration
	// Err is the transport failure of a request that got no answer.
	Err error
	// Header is the answer's headers (nil without an answer): some errors
	// say more there, e.g. a log gap's HeaderLogSize.
	Header http.Header
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Status != 0 {
		fmt.Fprintf(&b, "%d ", e.Status)
	}
	b.WriteString(string(e.Code))
	if e.Field != "" {
		b.WriteString(" (" + e.Field + ")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// RetryAfter is how long the server asked to wait before a retry (0 when
// it did not say); it makes *Error a retry.Hinted.
func (e *Error) RetryAfter() time.Duration { return e.Wait }

// Unwrap is the transport failure, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is matches a sentinel of this package by code: errors.Is(err,
// api.ErrFenced) holds for any fenced answer, whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == 0 && t.Message == "" && t.Code != "" && t.Code == e.Code
}

// Sentinels for errors.Is, one per code clients branch on.
var (
	ErrInvalid         = &Error{Code: fleet.CodeInvalid}
	ErrUnauthenticated = &Error{Code: fleet.CodeUnauthenticated}
	ErrForbidden       = &Error{Code: fleet.CodeForbidden}
	ErrNotFound        = &Error{Code: fleet.CodeNotFound}
	ErrConflict        = &Error{Code: fleet.CodeConflict}
	ErrFenced          = &Error{Code: fleet.CodeFenced}
	ErrTooLarge        = &Error{Code: fleet.CodeTooLarge}
	ErrThrottled       = &Error{Code: fleet.CodeThrottled}
	ErrUnavailable     = &Error{Code: fleet.CodeUnavailable}
)

// CodeOf is the API error code of err, "" when err is not an *Error.
func CodeOf(err error) fleet.Code {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return ""
}

// IsPermanent reports an answer that will not change on retry: a 4xx other
// than 429.
func IsPermanent(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests
}

// errorFrom reads the API's error shape; an answer without it (a proxy's
// page, say) is classified by its status alone.
func errorFrom(status int, body []byte, retryAfter time.Duration) *Error {
	var eb ErrorBody
	if jsonUnmarshal(body, &eb) == nil && eb.Error.Code != "" {
		return &Error{Status: status, Code: eb.Error.Code, Message: eb.Error.Message, Field: eb.Error.Field, Wait: retryAfter}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return &Error{Status: status, Code: codeForStatus(status), Message: msg, Wait: retryAfter}
}

func codeForStatus(status int) fleet.Code {
	switch {
	case status == http.StatusUnauthorized:
		return fleet.CodeUnauthenticated
	case status == http.StatusForbidden:
		return fleet.CodeForbidden
	case status == http.StatusNotFound:
		return fleet.CodeNotFound
	case status == http.StatusConflict:
		return fleet.CodeConflict
	case status == http.StatusTooManyRequests:
		return fleet.CodeThrottled
	case status >= 500:
		return fleet.CodeUnavailable
	default:
		return fleet.CodeInvalid
	}
}
