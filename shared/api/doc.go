// Package api is the /fleet HTTP contract written once: every request and
// response body of the API with its JSON tags, the error body, and Client,
// the one typed Go client of it. The server (shared/httpapi) decodes its
// requests into these types and encodes its answers from them; the factory,
// fleetctl and the test and demo tools call the API through Client. The
// OpenAPI document the server serves is checked against these types by a
// test, so neither can drift from the other.
//
// Domain documents the API answers as they are stored (fleet.Job,
// fleet.Factory, fleet.Run, fleet.Event, fleet.Artifact, ...) are not
// repeated here: the contract uses the fleet types.
//
// A request field that the server must tell absent from zero (a required
// lease epoch, an optional stage) is a pointer; Ptr makes one. Optional
// fields carry omitempty so that a client sends only what it sets; the
// server's decoding does not depend on it.
//
// The package depends on the domain types (shared/fleet), the worker
// protocol (shared/protocol: Claimed, Renewal), the clock and the retry
// policy only: a client links neither the coordinator nor the server. The
// dependency does not go the other way: the coordinator's use cases do no
// HTTP and do not link this package's client, so the answers they build
// (coord's views, shared/schedule's explanation) keep their own types,
// held to the same schemas as these by the OpenAPI tests in httpapi.
package api

// Ptr returns a pointer to v, for the pointer fields of requests.
func Ptr[T any](v T) *T { return &v }
