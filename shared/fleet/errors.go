// Package fleet is the domain of the fleet coordinator: jobs, factories,
// products, the stage machine and the manifest format. It does no I/O.
package fleet

import (
	"errors"
	"fmt"
)

// Code classifies an error; the HTTP layer maps each code to one status.
type Code string

// Error codes, as the API contract names them.
const (
	CodeInvalid         Code = "invalid_argument"
	CodeUnauthenticated Code = "unauthenticated"
	CodeForbidden       Code = "forbidden"
	CodeNotFound        Code = "not_found"
	CodeConflict        Code = "conflict"
	CodeFenced          Code = "fenced"
	CodeTooLarge        Code = "too_large"
	CodeRepoNotOwned    Code = "repo_not_owned"
	CodeBudgetExceeded  Code = "budget_exceeded"
	CodePaused          Code = "paused"
	CodeThrottled       Code = "throttled"
	CodeUnavailable     Code = "unavailable"
)

// Codes lists every code, in the order of their HTTP statuses.
func Codes() []Code {
	return []Code{CodeInvalid, CodeUnauthenticated, CodeForbidden, CodeNotFound, CodeConflict, CodeFenced,
		CodeTooLarge, CodeRepoNotOwned, CodeBudgetExceeded, CodePaused, CodeThrottled, CodeUnavailable}
}

// Error is the one error type use cases return to callers. Field names the
// JSON path at fault when a single field is.
type Error struct {
	Code    Code
	Field   string
	Message string
	Err     error // cause, for logs; never shown to clients
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches any *Error with the same code, so errors.Is(err, fleet.ErrFenced)
// works whatever the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Field == ""
}

// Sentinels for errors.Is.
var (
	ErrInvalid        = &Error{Code: CodeInvalid}
	ErrForbidden      = &Error{Code: CodeForbidden}
	ErrNotFound       = &Error{Code: CodeNotFound}
	ErrConflict       = &Error{Code: CodeConflict}
	ErrFenced         = &Error{Code: CodeFenced}
	ErrTooLarge       = &Error{Code: CodeTooLarge}
	ErrRepoNotOwned   = &Error{Code: CodeRepoNotOwned}
	ErrBudgetExceeded = &Error{Code: CodeBudgetExceeded}
	ErrPaused         = &Error{Code: CodePaused}
	ErrUnavailable    = &Error{Code: CodeUnavailable}
)

// Invalid reports a bad value in one field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Errorf builds an error of the given code.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err, or "" when err is not a fleet error.
func CodeOf(err error) Code {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	var te *IllegalTransitionError
	if errors.As(err, &te) {
		return CodeConflict
	}
	return ""
}
