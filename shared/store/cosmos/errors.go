package cosmos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
)

// opError is the error every store method returns. Its message is one line
// (the SDK's ResponseError prints a multi-line dump); it unwraps to the
// store error (store.ErrNotFound, …) when there is one and to the underlying
// error, so callers can errors.Is on both and errors.As an
// *azcore.ResponseError for details.
type opError struct {
	msg  string
	errs []error
}

func (e *opError) Error() string   { return e.msg }
func (e *opError) Unwrap() []error { return e.errs }

// located adds to an error which part of an operation failed (which feed
// range of a change-feed read) while classify still sees the service error.
type located struct {
	where string
	err   error
}

func (e *located) Error() string { return e.where + ": " + e.err.Error() }
func (e *located) Unwrap() error { return e.err }

func locate(where string, err error) error { return &located{where: where, err: err} }

// badContinuation marks a failure the caller's continuation caused
// (store.ErrBadContinuation) without repeating that in the message, which
// classify words.
type badContinuation struct{ err error }

func (e badContinuation) Error() string   { return e.err.Error() }
func (e badContinuation) Unwrap() []error { return []error{store.ErrBadContinuation, e.err} }

// invalid builds the error for arguments refused before any request is sent.
func invalid(op, where string, err error) error {
	return &opError{msg: fmt.Sprintf("cosmos: %s %s: %v", op, where, err), errs: []error{err}}
}

// classify maps a failed operation to the store's errors.
//
//	404 → ErrNotFound, 409 → ErrExists, 412 → ErrPrecondition,
//	413 → ErrTooLarge,
//	429 (retries exhausted) → ErrThrottled,
//	503, 408, 502, 504, transport failures → ErrUnavailable.
//
// A deadline or cancellation is reported as what was happening on the wire
// when it struck: waiting out 429s is ErrThrottled, a server that kept
// failing or could not be reached is ErrUnavailable, and a deadline the store
// itself set (Config.OperationTimeout) is ErrUnavailable even with nothing on
// the wire; the context error is wrapped as well.
func classify(op, where string, err error, t *tracker, ownDeadline bool) error {
	charge, _, lastStatus, lastErr := t.snapshot()
	var (
		storeErr error
		detail   string
	)
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re):
		storeErr = statusError(re.StatusCode)
		detail = responseDetail(re)
		var loc *located
		if errors.As(err, &loc) {
			detail = loc.where + ": " + detail
		}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		switch {
		case lastStatus == http.StatusTooManyRequests:
			storeErr = store.ErrThrottled
			detail = "deadline while throttled (HTTP 429)"
		case lastStatus != 0 && statusError(lastStatus) == store.ErrUnavailable:
			storeErr = store.ErrUnavailable
			detail = fmt.Sprintf("deadline after HTTP %d", lastStatus)
		case ownDeadline:
			storeErr = store.ErrUnavailable
			detail = "no answer within the operation timeout: " + err.Error()
		case lastErr != nil && isTransport(lastErr):
			storeErr = store.ErrUnavailable
			detail = fmt.Sprintf("%v after transport error: %v", err, lastErr)
		default:
			detail = err.Error()
		}
	case isTransport(err):
		storeErr = store.ErrUnavailable
		detail = err.Error()
	default:
		// A response the store cannot use (a document that is not an
		// object, a patch result without the field) or an SDK refusal:
		// a bug or misconfiguration, not a state a caller can wait out.
		detail = err.Error()
	}
	if storeErr == nil && errors.Is(err, store.ErrBadContinuation) {
		// The service or the SDK refused a continuation the caller gave.
		storeErr = store.ErrBadContinuation
	}
	msg := fmt.Sprintf("cosmos: %s %s: ", op, where)
	errs := []error{err}
	if storeErr != nil {
		msg += storeErr.Error() + " (" + detail + ")"
		errs = append([]error{storeErr}, errs...)
	} else {
		msg += detail
	}
	if charge > 0 {
		msg += fmt.Sprintf(" [%.2f RU]", charge)
	}
	return &opError{msg: msg, errs: errs}
}

// isTransport reports a failure to exchange a request with the service:
// DNS, TCP, a connection dropped mid-exchange. The SDK has already retried
// those it could retry safely.
func isTransport(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE)
}

// statusError is the store error for an HTTP status, nil when none applies
// (400, 401, 403, 500: the message carries the status).
func statusError(status int) error {
	switch status {
	case http.StatusNotFound:
		return store.ErrNotFound
	case http.StatusConflict:
		return store.ErrExists
	case http.StatusPreconditionFailed:
		return store.ErrPrecondition
	case http.StatusRequestEntityTooLarge:
		return store.ErrTooLarge
	case http.StatusTooManyRequests:
		return store.ErrThrottled
	case http.StatusServiceUnavailable, http.StatusRequestTimeout,
		http.StatusBadGateway, http.StatusGatewayTimeout:
		return store.ErrUnavailable
	}
	return nil
}

// responseDetail summarises a service error on one line: status, substatus,
// activity id (what Azure support asks for) and the service's message.
func responseDetail(re *azcore.ResponseError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", re.StatusCode)
	if re.ErrorCode != "" && !strings.HasPrefix(re.ErrorCode, fmt.Sprint(re.StatusCode)) {
		fmt.Fprintf(&b, " %s", re.ErrorCode)
	}
	if r := re.RawResponse; r != nil {
		if s := r.Header.Get(headerSubstatus); s != "" && s != "0" {
			fmt.Fprintf(&b, ", substatus %s", s)
		}
		if a := r.Header.Get(headerActivityID); a != "" {
			fmt.Fprintf(&b, ", activity %s", a)
		}
		// Errors without a store meaning (400, 403, …) are bugs or
		// misconfiguration; the service's message says which.
		if statusError(re.StatusCode) == nil {
			if m := serviceMessage(r); m != "" {
				fmt.Fprintf(&b, ": %s", m)
			}
		}
	}
	return b.String()
}

// serviceMessage returns the first line of a Cosmos error body's message.
func serviceMessage(r *http.Response) string {
	body, err := runtime.Payload(r)
	if err != nil || len(body) == 0 {
		return ""
	}
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	m, _, _ := strings.Cut(e.Message, "\n")
	m, _, _ = strings.Cut(m, "\r")
	m = strings.TrimSpace(m)
	const maxLen = 300
	if len(m) > maxLen {
		m = m[:maxLen] + "…"
	}
	return m
}
