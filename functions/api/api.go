// Package api is the `api` function: every /api route of the fleet. The host
// forwards the original HTTP request (enableForwardingHttpRequest in
// host.json), so the API is served as it is, headers, status codes and
// binary bodies untouched, with no envelope to translate. Func also serves
// the envelope form, for a host configured without forwarding.
package api

import (
	"net/http"

	"github.com/gigafactory/fleet/shared/funchost"
)

// Name is the function's folder name.
const Name = "api"

// Binding names in function.json.
const (
	RequestBinding  = "req"
	ResponseBinding = "res"
)

// Func answers an envelope-mode invocation through the API handler.
func Func(h http.Handler) funchost.Func {
	return funchost.HTTPFunc(h, RequestBinding, ResponseBinding)
}
