package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// Codes the HTTP layer adds to fleet's (api.CodeMethodNotAllowed,
// api.CodeInternal): neither can come from a use case.
const (
	codeMethodNotAllowed = api.CodeMethodNotAllowed
	codeInternal         = api.CodeInternal
)

// apiCodes is every code the API answers with: fleet's, in the order of
// their statuses, with method_not_allowed by its status and internal, the
// catch-all, last.
func apiCodes() []fleet.Code {
	codes := fleet.Codes()
	codes = slices.Insert(codes, slices.Index(codes, fleet.CodeNotFound)+1, codeMethodNotAllowed)
	return append(codes, codeInternal)
}

// Retry-After values, in seconds. Throttling clears fast (the store already
// retried before giving up); an unreachable store is worth a longer pause.
const (
	retryAfterThrottled   = 1
	retryAfterUnavailable = 5
)

// statusOf maps an error code to its HTTP status, as API.md fixes it.
func statusOf(code fleet.Code) int {
	switch code {
	case fleet.CodeInvalid:
		return http.StatusBadRequest
	case fleet.CodeUnauthenticated:
		return http.StatusUnauthorized
	case fleet.CodeForbidden:
		return http.StatusForbidden
	case fleet.CodeNotFound:
		return http.StatusNotFound
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case fleet.CodeConflict, fleet.CodeFenced:
		return http.StatusConflict
	case fleet.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case fleet.CodeRepoNotOwned, fleet.CodeBudgetExceeded, fleet.CodePaused:
		return http.StatusUnprocessableEntity
	case fleet.CodeThrottled:
		return http.StatusTooManyRequests
	case fleet.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// classify turns any error a handler returns into what the client sees.
// Only fleet errors carry a client-facing message; everything else is
// either a store condition the client can retry or an internal fault whose
// details stay in the log.
func classify(err error) api.ErrorDetail {
	var fe *fleet.Error
	var te *fleet.IllegalTransitionError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &fe):
		return api.ErrorDetail{Code: fe.Code, Message: fe.Message, Field: fe.Field}
	case errors.As(err, &te):
		return api.ErrorDetail{Code: fleet.CodeConflict, Message: te.Error()}
	case errors.As(err, &tooBig):
		return api.ErrorDetail{Code: fleet.CodeTooLarge, Message: fmt.Sprintf("the request body is larger than %d bytes", tooBig.Limit)}
	case errors.Is(err, store.ErrTooLarge):
		// A use case's own bounds should have named the field; this is the
		// store refusing a document that slipped past them.
		return api.ErrorDetail{Code: fleet.CodeTooLarge, Message: "the request would store a document larger than the store allows"}
	case errors.Is(err, store.ErrThrottled):
		return api.ErrorDetail{Code: fleet.CodeThrottled, Message: "the store is throttling requests; retry after the Retry-After delay"}
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return api.ErrorDetail{Code: fleet.CodeUnavailable, Message: "the store is unavailable; retry after the Retry-After delay"}
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer, but the log and
		// the metrics should not count it as a server fault.
		return api.ErrorDetail{Code: fleet.CodeUnavailable, Message: "the request was cancelled"}
	}
	return api.ErrorDetail{Code: codeInternal, Message: "internal error"}
}

// writeError answers with err in the API's error shape and logs what the
// client is not shown.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	d := classify(err)
	status := statusOf(d.Code)
	st := stateOf(r.Context())
	st.code = d.Code
	h := w.Header()
	switch d.Code {
	case fleet.CodeUnauthenticated:
		h.Set("WWW-Authenticate", `Bearer realm="fleet"`)
	case fleet.CodeThrottled:
		h.Set("Retry-After", strconv.Itoa(retryAfterThrottled))
	case fleet.CodeUnavailable:
		h.Set("Retry-After", strconv.Itoa(retryAfterUnavailable))
	}
	if ra, ok := errors.AsType[retryAfter](err); ok {
		h.Set("Retry-After", strconv.Itoa(ra.seconds))
	}
	if status >= http.StatusInternalServerError {
		level := slog.LevelError
		if errors.Is(err, context.Canceled) {
			level = slog.LevelInfo
		}
		s.log.Log(r.Context(), level, "request failed", "requestId", st.id, "method", r.Method,
			"path", r.URL.Path, "status", status, "err", err)
	}
	if d.Code == codeInternal {
		d.Message = "internal error; quote request id " + st.id + " when reporting it"
	}
	_ = writeJSON(w, status, api.ErrorBody{Error: d})
}

func forbidden(format string, args ...any) error {
	return fleet.Errorf(fleet.CodeForbidden, format, args...)
}

func unauthenticated(msg string) error {
	return &fleet.Error{Code: fleet.CodeUnauthenticated, Message: msg}
}
