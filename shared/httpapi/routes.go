package httpapi

// route is one entry of the API: the mux is built from this table, and a
// test holds it against the OpenAPI document so neither can drift.
type route struct {
	method  string
	pattern string // a net/http ServeMux pattern path, under /api
	access  access
	// query lists the query parameters the route takes; any other is 400.
	query []string
	// long says which of its requests count against the stream caps.
	long   longLived
	handle handlerFunc
}

// apiPrefix is where the Functions host mounts HTTP routes.
const apiPrefix = "/api"

// routes is every route the API serves.
var routes = []route{
	{method: "GET", pattern: "/api/healthz", access: public, handle: (*server).healthz},
	{method: "GET", pattern: "/api/openapi.json", access: public, handle: (*server).openAPI},

	{method: "POST", pattern: "/api/fleet/jobs", access: operatorOnly, handle: (*server).submitJob},
	{method: "GET", pattern: "/api/fleet/jobs", access: operatorOnly, query: []string{"stage", "limit", "cursor"}, handle: (*server).listJobs},
	{method: "GET", pattern: "/api/fleet/jobs/{id}", access: anyPrincipal, handle: (*server).getJob},
	{method: "PATCH", pattern: "/api/fleet/jobs/{id}", access: factoryOnly, handle: (*server).patchJob},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/actions/{action}", access: operatorOnly, handle: (*server).actOnJob},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/lease/renew", access: factoryOnly, handle: (*server).renewLease},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/lease/release", access: factoryOnly, handle: (*server).releaseLease},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/runs", access: operatorOrHolder, handle: (*server).jobRuns},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/events", access: operatorOrHolder, query: []string{"after", "limit", "wait"}, long: longWithWait, handle: (*server).jobEvents},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/events/stream", access: operatorOrHolder, query: []string{"after"}, long: alwaysLong, handle: (*server).jobEventStream},
	{method: "GET", pattern: "/api/fleet/events", access: operatorOnly, query: []string{"after", "wait"}, long: longWithWait, handle: (*server).productEvents},
	{method: "GET", pattern: "/api/fleet/events/stream", access: operatorOnly, query: []string{"after"}, long: alwaysLong, handle: (*server).productEventStream},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/explain", access: operatorOrHolder, handle: (*server).explainJob},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/children", access: anyPrincipal, handle: (*server).postChildren},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/dag", access: operatorOrHolder, handle: (*server).jobDAG},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/review/request", access: anyPrincipal, handle: (*server).requestReview},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/review", access: operatorOnly, handle: (*server).vote},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/artifacts", access: anyPrincipal, query: []string{"name", "kind", "leaseEpoch"}, handle: (*server).uploadArtifact},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/artifacts", access: operatorOrHolder, handle: (*server).listArtifacts},
	{method: "GET", pattern: "/api/fleet/artifacts/{id}", access: operatorOrHolder, handle: (*server).getArtifact},
	{method: "GET", pattern: "/api/fleet/artifacts/{id}/content", access: operatorOrHolder, handle: (*server).artifactContent},
	{method: "DELETE", pattern: "/api/fleet/artifacts/{id}", access: operatorOnly, handle: (*server).deleteArtifact},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/usage", access: factoryOnly, handle: (*server).reportUsage},

	{method: "POST", pattern: "/api/fleet/claim", access: factoryOnly, handle: (*server).claim},
	{method: "POST", pattern: "/api/fleet/accept", access: factoryOnly, handle: (*server).accept},
	{method: "POST", pattern: "/api/fleet/fail", access: factoryOnly, handle: (*server).fail},

	{method: "POST", pattern: "/api/fleet/factories/enroll", access: operatorOnly, handle: (*server).enroll},
	{method: "POST", pattern: "/api/fleet/factories/heartbeat", access: factoryOnly, handle: (*server).heartbeat},
	{method: "GET", pattern: "/api/fleet/factories", access: operatorOnly, handle: (*server).listFactories},
	{method: "DELETE", pattern: "/api/fleet/factories/{id}", access: operatorOnly, handle: (*server).deregister},
	{method: "POST", pattern: "/api/fleet/factories/{id}/drain", access: operatorOnly, handle: (*server).drain},
	{method: "POST", pattern: "/api/fleet/factories/{id}/undrain", access: operatorOnly, handle: (*server).undrain},
	{method: "POST", pattern: "/api/fleet/factories/{id}/token/rotate", access: operatorOrSelf, handle: (*server).rotateToken},
	{method: "POST", pattern: "/api/fleet/factories/{id}/token/revoke", access: operatorOrSelf, handle: (*server).revokeToken},

	{method: "PUT", pattern: "/api/fleet/products/{productId}", access: operatorOnly, handle: (*server).putProduct},
	{method: "GET", pattern: "/api/fleet/products/{productId}", access: operatorOnly, handle: (*server).getProduct},
	{method: "GET", pattern: "/api/fleet/repos", access: operatorOnly, handle: (*server).repos},

	{method: "POST", pattern: "/api/fleet/tracker/ingest", access: operatorOnly, handle: (*server).ingest},
	{method: "POST", pattern: "/api/fleet/tracker/echo", access: operatorOnly, handle: (*server).resendEcho},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/echo", access: operatorOnly, handle: (*server).jobEcho},

	{method: "PUT", pattern: "/api/fleet/profiles/{name}", access: operatorOnly, handle: (*server).putProfile},
	{method: "GET", pattern: "/api/fleet/profiles", access: operatorOnly, handle: (*server).listProfiles},
	{method: "GET", pattern: "/api/fleet/profiles/{name}", access: operatorOnly, query: []string{"version"}, handle: (*server).getProfile},
	{method: "GET", pattern: "/api/fleet/profiles/{name}/versions", access: operatorOnly, handle: (*server).profileVersions},

	{method: "PUT", pattern: "/api/fleet/budgets/{productId}", access: operatorOnly, handle: (*server).putBudget},
	{method: "GET", pattern: "/api/fleet/budgets/{productId}", access: operatorOnly, handle: (*server).getBudget},
	{method: "GET", pattern: "/api/fleet/budgets/{productId}/burndown", access: operatorOnly, handle: (*server).burndown},
	{method: "POST", pattern: "/api/fleet/budgets/{productId}/pause", access: operatorOnly, handle: (*server).pauseBudget},
	{method: "POST", pattern: "/api/fleet/budgets/{productId}/resume", access: operatorOnly, handle: (*server).resumeBudget},

	{method: "GET", pattern: "/api/fleet/metrics", access: operatorOnly, handle: (*server).metrics},
	{method: "GET", pattern: "/api/fleet/queue-state", access: anyPrincipal, handle: (*server).queueState},
}
