// Package api is the `api` function: every /api route of the fleet. The host
// forwards the original HTTP request (enableForwardingHttpRequest in
// host.json), so the API is served as it is, headers, status codes and
// binary bodies untouched, with no envelope to translate. Func also serves
// the envelope form, for a host configured without forwarding.
package api

import (
	"net/http"

	"github.com/gigafactory/fleet/shared/funchost"
	"github.com/gigafactory/fleet/shared/httpapi"
)

// Name is the function's folder name.
const Name = "api"

// Binding names in function.json.
const (
	RequestBinding  = "req"
	ResponseBinding = "res"
)

// Func answers an envelope-mode invocation through the API handler. The
// answer goes back whole in Outputs.res, so nothing streams: the request is
// marked buffered and a live event stream answers as a long poll instead of
// holding the invocation until the stream's end.
func Func(h http.Handler) funchost.Func {
	buffered := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(httpapi.WithBufferedResponse(r.Context())))
	})
	return funchost.HTTPFunc(buffered, RequestBinding, ResponseBinding)
}
