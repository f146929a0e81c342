package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// The OpenAPI 3.1 document is written by hand here, operation by operation,
// rather than generated from the route table: that way a test comparing the
// two catches a route added without documentation, or documentation of a
// route that does not exist.

type obj = map[string]any

// operation documents one method on one path (relative to /api).
type operation struct {
	method, path string
	summary      string
	description  string
	access       access
	params       []obj // path and query parameters
	body         obj   // request body, or nil
	ok           map[string]obj
	// errors are the statuses beyond those every authenticated operation
	// may answer (401, 403, 429, 500, 503).
	errors []string
}

func (s *server) openAPI(w http.ResponseWriter, _ *http.Request, _ *principal) error {
	body, err := openAPIJSON()
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return nil
}

// openAPIJSON is built once: the document is static.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	return json.MarshalIndent(openAPIDocument(), "", "  ")
})

func openAPIDocument() obj {
	paths := obj{}
	for _, op := range operations() {
		item, _ := paths[op.path].(obj)
		if item == nil {
			item = obj{}
			paths[op.path] = item
		}
		item[strings.ToLower(op.method)] = op.render()
	}
	return obj{
		"openapi": "3.1.0",
		"info": obj{
			"title":   "Gigafactory fleet API",
			"version": "1",
			"description": "The /fleet REST contract. Authenticate with Authorization: Bearer <token> " +
				"(an operator token from configuration, or a factory token from enrollment). " +
				"x-product-id selects the product on product-scoped routes. Errors are " +
				`{"error": {"code", "message", "field"}}. x-fleet-access on each operation says ` +
				"which principals it admits: operator, factory (the route acts as that factory), " +
				"operator,factory (factories only within their products), operator,factory-self " +
				"(a factory only on itself) or operator,factory-holder (a factory only for a job it holds now, 403 otherwise).",
		},
		"servers":  []obj{{"url": apiPrefix}},
		"security": []obj{{"bearer": []string{}}},
		"paths":    paths,
		"components": obj{
			"securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer",
				"description": "An operator token, or a factory token (prefix fft_) issued by enrollment."}},
			"parameters": obj{
				"ProductId": obj{"name": headerProduct, "in": "header", "required": false, "schema": name(""),
					"description": "The product the request is for. Optional for a token scoped to one product; " +
						"job routes without it find the job across products the token may see."},
			},
			"responses": errorResponses(),
			"schemas":   schemas(),
		},
	}
}

func (op operation) render() obj {
	o := obj{
		"operationId":    operationID(op.method, op.path),
		"summary":        op.summary,
		"x-fleet-access": op.access.String(),
	}
	if op.description != "" {
		o["description"] = op.description
	}
	params := op.params
	if op.access == public {
		o["security"] = []obj{}
	} else {
		params = append(params, obj{"$ref": "#/components/parameters/ProductId"})
	}
	if len(params) > 0 {
		o["parameters"] = params
	}
	if op.body != nil {
		o["requestBody"] = op.body
	}
	resp := obj{}
	for status, r := range op.ok {
		resp[status] = r
	}
	statuses := op.errors
	if op.access != public {
		statuses = append(statuses, "401", "403", "429", "503", "500")
	}
	for _, st := range statuses {
		resp[st] = obj{"$ref": "#/components/responses/" + errorResponseName[st]}
	}
	o["responses"] = resp
	return o
}

// operationID turns "POST /fleet/jobs/{id}/lease/renew" into
// "post_fleet_jobs_id_lease_renew".
func operationID(method, path string) string {
	r := strings.NewReplacer("/", "_", "{", "", "}", "", "-", "_", ".", "_")
	return strings.ToLower(method) + r.Replace(path)
}

var errorResponseName = map[string]string{
	"400": "BadRequest", "401": "Unauthenticated", "403": "Forbidden", "404": "NotFound",
	"409": "Conflict", "413": "TooLarge", "422": "Unprocessable", "429": "Throttled",
	"500": "Internal", "503": "Unavailable",
}

func errorResponses() obj {
	desc := map[string]string{
		"400": "invalid_argument: bad JSON, an unknown or repeated field, a wrong type, a bad parameter or an invalid manifest; field names the culprit.",
		"401": "unauthenticated: the token is missing, malformed, unknown or revoked.",
		"403": "forbidden: the token may not use this route, or the product, job or factory is outside its scope.",
		"404": "not_found.",
		"409": "conflict (lost a race, illegal transition, stale dispatchEpoch) or fenced (stale leaseEpoch, or not the holder).",
		"413": "too_large: the body or the manifest is over the limit.",
		"422": "repo_not_owned, budget_exceeded or paused: the request can never succeed as it is.",
		"429": "throttled: retry after Retry-After seconds.",
		"500": "internal: the message quotes the request id; the cause is in the server log.",
		"503": "unavailable: retry after Retry-After seconds.",
	}
	out := obj{}
	for status, n := range errorResponseName {
		r := obj{"description": desc[status], "content": jsonContent(ref("Error"))}
		if status == "429" || status == "503" {
			r["headers"] = obj{"Retry-After": obj{"schema": obj{"type": "integer"}, "description": "Seconds to wait before retrying."}}
		}
		if status == "401" {
			r["headers"] = obj{"WWW-Authenticate": obj{"schema": obj{"type": "string"}}}
		}
		out[n] = r
	}
	return out
}

func jsonContent(schema obj) obj { return obj{"application/json": obj{"schema": schema}} }

func jsonBody(schema obj) obj {
	return obj{"required": true, "content": jsonContent(schema)}
}

func optionalJSONBody(schema obj) obj {
	return obj{"required": false, "content": jsonContent(schema)}
}

func respond(desc string, schema obj) obj {
	r := obj{"description": desc}
	if schema != nil {
		r["content"] = jsonContent(schema)
	}
	return r
}

// eventStream is a text/event-stream answer.
func eventStream(desc string) obj {
	return obj{"description": desc, "content": obj{"text/event-stream": obj{"schema": obj{"type": "string"}}}}
}

func pathParam(n, desc string) obj {
	return obj{"name": n, "in": "path", "required": true, "schema": name(""), "description": desc}
}

func queryParam(n, desc string, schema obj) obj {
	return obj{"name": n, "in": "query", "required": false, "schema": schema, "description": desc}
}

var jobID = pathParam("id", "The job id.")

// operations documents every route. Keep it in step with routes.go; the
// tests compare the two.
func operations() []operation {
	return []operation{
		{method: "GET", path: "/healthz", access: public, summary: "Liveness",
			description: "Answers while the process serves HTTP; it does not touch the store.",
			ok:          map[string]obj{"200": respond("Alive.", ref("Health"))}},
		{method: "GET", path: "/openapi.json", access: public, summary: "This document",
			ok: map[string]obj{"200": respond("The OpenAPI 3.1 document.", obj{"type": "object"})}},

		{method: "POST", path: "/fleet/jobs", access: operatorOnly, summary: "Submit a job",
			description: "The manifest is Markdown with YAML front matter, sent raw (text/markdown) or as " +
				`{"manifest": "..."}` + " (application/json). Needs a product: x-product-id, or a token scoped to one. " +
				"The same idempotencyKey again returns the existing job with 200.",
			body: obj{"required": true, "content": obj{
				"text/markdown":    obj{"schema": obj{"type": "string", "maxLength": fleet.MaxManifestBytes}},
				"application/json": obj{"schema": ref("SubmitRequest")},
			}},
			ok: map[string]obj{
				"201": withHeader(respond("Created.", ref("Job")), "Location", "The job's URL."),
				"200": respond("The job this idempotencyKey already made.", ref("Job")),
			},
			errors: []string{"400", "413", "422"}},
		{method: "GET", path: "/fleet/jobs", access: operatorOnly, summary: "List a product's jobs",
			description: "In creation order, one page at a time. Needs a product: x-product-id, or a token scoped to one.",
			params: []obj{
				queryParam("stage", "Only jobs in this stage.", ref("Stage")),
				queryParam("limit", "Page size.", obj{"type": "integer", "minimum": 1, "maximum": maxJobPage, "default": defaultJobPage}),
				queryParam("cursor", "The cursor of the previous page.", obj{"type": "string", "maxLength": maxCursorLen}),
			},
			ok:     map[string]obj{"200": respond("One page.", ref("JobPage"))},
			errors: []string{"400"}},
		{method: "GET", path: "/fleet/jobs/{id}", access: anyPrincipal, summary: "Read a job",
			description: "A factory token reads any job of its products, held or not (its branch GC and recovery ask about jobs it no longer holds); " +
				"the job's runs, events, explanation, DAG and artifacts only while it holds it.",
			params: []obj{jobID}, ok: map[string]obj{"200": respond("The job.", ref("Job"))},
			errors: []string{"400", "404"}},
		{method: "PATCH", path: "/fleet/jobs/{id}", access: factoryOnly, summary: "Update a held job (fenced)",
			description: "The holder moves its job to building, review, testing or shipped and/or records a checkpoint. " +
				"A stale leaseEpoch or another factory gets 409 fenced and changes nothing.",
			params: []obj{jobID}, body: jsonBody(ref("PatchRequest")),
			ok:     map[string]obj{"200": respond("The job after the update.", ref("Job"))},
			errors: []string{"400", "404", "409", "413"}},
		{method: "POST", path: "/fleet/jobs/{id}/actions/{action}", access: operatorOnly, summary: "Operator action",
			description: "ship, requeue, reject or cancel, where the stage machine allows it (409 otherwise). A requeued job whose dependencies have not shipped is blocked until they do; a job whose dependencies can no longer ship fails with reason dependency_failed. " +
				"Cancel of a job that holds no lease is immediate (200). Cancel of a leased job answers 202 with cancelRequested set: the holder hears of it at once (control message) or at its next renewal, stops, checkpoints and releases with outcome cancelled; without that acknowledgement within the cancel grace the lease is revoked and the job cancelled anyway (events cancel_acknowledged or cancel_forced).",
			params: []obj{jobID, obj{"name": "action", "in": "path", "required": true,
				"schema": enum("", "ship", "requeue", "reject", "cancel")}},
			body: optionalJSONBody(ref("ActionRequest")),
			ok: map[string]obj{"200": respond("The job after the action.", ref("Job")),
				"202": respond("Cancel of a leased job: requested of its holder; the job as it is now.", ref("Job"))},
			errors: []string{"400", "404", "409", "413"}},
		{method: "POST", path: "/fleet/jobs/{id}/lease/renew", access: factoryOnly, summary: "Renew a lease",
			params: []obj{jobID}, body: jsonBody(ref("LeaseRequest")),
			ok:     map[string]obj{"200": respond("The new expiry.", ref("RenewResponse"))},
			errors: []string{"400", "404", "409", "413"}},
		{method: "POST", path: "/fleet/jobs/{id}/lease/release", access: factoryOnly, summary: "Release a lease",
			description: "Without an outcome the job goes back to the queue with its checkpoint. outcome cancelled acknowledges a cancel (the job ends cancelled); " +
				"outcome preempted acknowledges a preemption (queued again, no attempt spent). An outcome nobody asked for is 409; a job whose cancel is pending ends cancelled whatever the outcome.",
			params: []obj{jobID}, body: jsonBody(ref("ReleaseRequest")),
			ok:     map[string]obj{"200": respond("The job after the release.", ref("Job"))},
			errors: []string{"400", "404", "409", "413"}},
		{method: "GET", path: "/fleet/jobs/{id}/runs", access: operatorOrHolder, summary: "A job's runs",
			description: "One run per lease, oldest first; the run in progress, if any, last. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
			params:      []obj{jobID}, ok: map[string]obj{"200": respond("The runs.", listOf("Run"))},
			errors: []string{"400", "404"}},
		{method: "GET", path: "/fleet/jobs/{id}/events", access: operatorOrHolder, summary: "A job's events",
			description: "Oldest first. Page with after=<seq of the last event seen>. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
			params: []obj{jobID,
				queryParam("after", "Only events with a greater seq.", obj{"type": "integer", "minimum": 0, "default": 0}),
				queryParam("limit", "At most this many.", obj{"type": "integer", "minimum": 1, "maximum": maxEventPage, "default": maxEventPage}),
				queryParam("wait", "Long poll: when no event follows after, wait up to this long (a duration such as 30s, at most 60s) "+
					"for one before answering. The equivalent of the stream for clients behind a proxy that buffers responses. "+
					"A wait above zero counts against the stream caps (429 throttled past them).",
					obj{"type": "string", "default": "0s"}),
			},
			ok:     map[string]obj{"200": respond("The events.", listOf("Event"))},
			errors: []string{"400", "404"}},
		{method: "GET", path: "/fleet/jobs/{id}/events/stream", access: operatorOrHolder, summary: "A job's events, live (SSE)",
			description: "text/event-stream. Each event is `id: <seq>`, `event: <type>`, `data: <Event JSON>`. " +
				"Resume with the Last-Event-ID header (what EventSource sends) or after=<seq>: the events after it are replayed first, then live ones follow. " +
				"A `: keep-alive` comment every 15 s keeps it open. The stream ends after the event that takes the job to a terminal stage " +
				"(shipped, failed, dead_letter, cancelled), and after 200 s in any case, under the Azure front end's 230 s (reconnect with the last id: nothing is missed). " +
				"Behind a front door that buffers (the Lambda shape, or the Functions host forwarding instead of proxying: User-Agent Azure-Functions-Host/…) it ends as soon as it has sent events, at most 500 at a time, or after 60 s with nothing: a long poll. " +
				"A factory token may stream only a job it holds now (403 forbidden otherwise). A bad Last-Event-ID or after is 400 naming it." +
				" Counts against the stream caps (FLEET_MAX_STREAMS_PER_PRINCIPAL per token, FLEET_MAX_STREAMS per process): past either, 429 throttled with Retry-After, before anything is read.",
			params: []obj{jobID,
				queryParam("after", "Resume after this seq (Last-Event-ID wins when both are sent).", obj{"type": "integer", "minimum": 0}),
				{"name": headerLastEventID, "in": "header", "required": false, "schema": obj{"type": "string"}, "description": "The seq to resume after."},
			},
			ok:     map[string]obj{"200": eventStream("The job's events, as server-sent events.")},
			errors: []string{"400", "404"}},
		{method: "GET", path: "/fleet/jobs/{id}/explain", access: operatorOrHolder, summary: "Why a job went where it went",
			description: "Per factory: whether it passed the hard filter (and why not) and each score term with the total. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
			params:      []obj{jobID}, ok: map[string]obj{"200": respond("The explanation.", ref("Explanation"))},
			errors: []string{"400", "404"}},

		{method: "GET", path: "/fleet/events", access: operatorOnly, summary: "A product's changes, long poll",
			description: "The product stream (GET /fleet/events/stream) for a client that cannot stream: {items: [{id, type, data}], position}. " +
				"Pass the position back as after to get what changed since (a change may come twice); without after it starts from now. " +
				"With wait, an answer that would be empty waits up to that long for a change. Needs a product: x-product-id, or a token scoped to one.",
			params: []obj{
				queryParam("after", "The position of the previous answer (or an id of the stream).", obj{"type": "string"}),
				queryParam("wait", "Wait up to this long (a duration such as 30s, at most 60s) when nothing changed. "+
					"A wait above zero counts against the stream caps (429 throttled past them).", obj{"type": "string", "default": "0s"}),
			},
			ok: map[string]obj{"200": respond("The changes and the position after them.", object([]string{"items", "position"}, obj{
				"items": arrayOf(object([]string{"id", "type", "data"}, obj{
					"id": obj{"type": "string"}, "type": obj{"type": "string"}, "data": obj{"type": "object", "description": "An Event, or a Factory when type is factory."},
				})),
				"position": obj{"type": "string"},
			}))},
			errors: []string{"400"}},
		{method: "GET", path: "/fleet/events/stream", access: operatorOnly, summary: "A product's changes, live (SSE)",
			description: "text/event-stream of every change of the product's jobs (each job event: `event: <type>`, data the Event) " +
				"and of its factories (`event: factory`, data the Factory, shown as GET /fleet/factories shows it to the token). " +
				"Needs a product: x-product-id, or a token scoped to one. " +
				"Ids are opaque positions in the store's change feeds; a block with only an id (no data) moves the client's position without an event. " +
				"Resume with Last-Event-ID or after=<id>: what changed since is replayed first. A resumed client misses nothing and may see a change twice " +
				"(de-duplicate job events by data.id). Keep-alive comments every 15 s; the stream ends after 200 s (reconnect with the last id). " +
				"Behind a front door that buffers it ends as soon as it has sent changes, or after 60 s with nothing. " +
				"A bad Last-Event-ID or after is 400 naming it." +
				" Counts against the stream caps (FLEET_MAX_STREAMS_PER_PRINCIPAL per token, FLEET_MAX_STREAMS per process): past either, 429 throttled with Retry-After, before anything is read.",
			params: []obj{
				queryParam("after", "Resume after this id (Last-Event-ID wins when both are sent).", obj{"type": "string"}),
				{"name": headerLastEventID, "in": "header", "required": false, "schema": obj{"type": "string"}, "description": "The id to resume after."},
			},
			ok:     map[string]obj{"200": eventStream("The product's changes, as server-sent events.")},
			errors: []string{"400"}},
		{method: "POST", path: "/fleet/jobs/{id}/children", access: anyPrincipal, summary: "Give a job children",
			description: fmt.Sprintf("The children are created in the job's product with parentId set, each idempotent by its idempotencyKey "+
				"(a child without one is keyed by its parent and manifest: the same manifest again is the same child). A child's deps may name "+
				"a sibling of the same request by its idempotencyKey. The parent then waits in blocked: an operator posts to a queued or "+
				"blocked job; the holder factory posts with its leaseEpoch (fenced) and gives its seat back. When every child has shipped the "+
				"parent is queued for its own step, or shipped at once when kind: composite; a child ending unshipped fails it with "+
				"dependency_failed. Limits: %d children per request, depth %d below the root, %d jobs per tree (400 naming children). "+
				"201 when a child was created; 200 with the same jobs when every one existed already.",
				fleet.MaxChildrenPerRequest, fleet.MaxTreeDepth, fleet.MaxTreeJobs),
			params: []obj{jobID}, body: jsonBody(ref("ChildrenRequest")),
			ok: map[string]obj{"201": respond("The children, in the request's order.", listOf("Job")),
				"200": respond("The same children as before; nothing written.", listOf("Job"))},
			errors: []string{"400", "404", "409", "413", "422"}},
		{method: "GET", path: "/fleet/jobs/{id}/dag", access: operatorOrHolder, summary: "The tree of children a job belongs to",
			description: "Its root, every job below it and the jobs outside it one of them depends on, with child and dep edges and a count per stage. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
			params:      []obj{jobID}, ok: map[string]obj{"200": respond("The DAG.", ref("DAG"))},
			errors: []string{"400", "404"}},
		{method: "POST", path: "/fleet/jobs/{id}/review/request", access: anyPrincipal, summary: "Request a review",
			description: "Sets the review gate's head (a new head clears the votes) and, from an operator, its reviewers and quorum. " +
				"The holder (fenced by leaseEpoch) delivers its building job for review and may send only leaseEpoch and head: " +
				"reviewers or quorum from it are 403 forbidden naming the field (the party under review cannot change its own gate). " +
				"An operator changes the gate of a job in review, which passes to testing at once when the votes already make the quorum; " +
				"it may add reviewers or raise the quorum, never drop a reviewer the manifest listed or go below its quorum " +
				"(403 forbidden, field reviewers or quorum; the manifest's gate is kept as review.minimum). " +
				"A quorum above the number of reviewers is 400.",
			params: []obj{jobID}, body: jsonBody(ref("ReviewRequest")),
			ok:     map[string]obj{"200": respond("The job.", ref("Job"))},
			errors: []string{"400", "403", "404", "409", "413"}},
		{method: "POST", path: "/fleet/jobs/{id}/review", access: operatorOnly, summary: "Vote on a job in review",
			description: "The voter is the operator token's name (name:token in FLEET_OPERATOR_TOKEN); when the gate lists reviewers it must be " +
				"one of them (403 otherwise). A vote on another head than review.head is 409 conflict. A reviewer's later vote on the same head " +
				"replaces their earlier one. Approvals of quorum distinct reviewers move the job to testing; a rejection moves it to queued " +
				"with the comment as review.feedback (no attempt spent), or to failed with onReject: fail.",
			params: []obj{jobID}, body: jsonBody(ref("VoteRequest")),
			ok:     map[string]obj{"200": respond("The job after the vote.", ref("Job"))},
			errors: []string{"400", "404", "409", "413"}},
		{method: "POST", path: "/fleet/jobs/{id}/artifacts", access: anyPrincipal, summary: "Upload an artifact (holder fenced, or operator)",
			description: "The body is the artifact's bytes, with Content-Type saying what they are (default application/octet-stream) " +
				"and Content-Length declared (a chunked body is refused: the Functions host drops it). The holder factory sends " +
				"leaseEpoch and a stale one is 409 fenced with nothing stored; an operator sends none and the artifact belongs to no run. " +
				"Bytes are stored once per product whatever the number of identical uploads; over the size limit " +
				"(FLEET_ARTIFACT_MAX_BYTES) is 413 with nothing stored.",
			params: []obj{jobID,
				{"name": "name", "in": "query", "required": true, "schema": name(""), "description": "The artifact's name, such as output.log."},
				queryParam("kind", "What it holds; default other.", enum("", "log", "diff", "report", "other")),
				queryParam("leaseEpoch", "The holder's epoch; required of a factory, refused from an operator.", obj{"type": "integer", "minimum": 0}),
			},
			body:   obj{"required": true, "content": obj{"*/*": obj{"schema": obj{"type": "string", "format": "binary"}}}},
			ok:     map[string]obj{"201": withHeader(respond("Stored.", ref("Artifact")), "Location", "The artifact's URL.")},
			errors: []string{"400", "404", "409", "413"}},
		{method: "GET", path: "/fleet/jobs/{id}/artifacts", access: operatorOrHolder, summary: "A job's artifacts",
			description: "Oldest first. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
			params:      []obj{jobID}, ok: map[string]obj{"200": respond("The artifacts.", listOf("Artifact"))},
			errors: []string{"400", "404"}},
		{method: "GET", path: "/fleet/artifacts/{id}", access: operatorOrHolder, summary: "Read an artifact's metadata",
			description: "A factory token reads this only for an artifact of a job it holds now (403 forbidden otherwise).",
			params:      []obj{pathParam("id", "The artifact id.")}, ok: map[string]obj{"200": respond("The artifact.", ref("Artifact"))},
			errors: []string{"400", "404"}},
		{method: "GET", path: "/fleet/artifacts/{id}/content", access: operatorOrHolder, summary: "Download an artifact's bytes",
			description: "With the artifact's Content-Type, its Content-Length and ETag \"<sha256>\"; If-None-Match with that tag answers 304. " +
				"Served as an attachment, sandboxed, never sniffed. A factory token reads this only for an artifact of a job it holds now (403 forbidden otherwise).",
			params: []obj{pathParam("id", "The artifact id."),
				{"name": "If-None-Match", "in": "header", "required": false, "schema": obj{"type": "string"}, "description": "The ETag held."}},
			ok: map[string]obj{
				"200": {"description": "The bytes.", "content": obj{"*/*": obj{"schema": obj{"type": "string", "format": "binary"}}},
					"headers": obj{"ETag": obj{"schema": obj{"type": "string"}, "description": "The SHA-256 of the bytes, quoted."}}},
				"304": respond("Not modified: the client's copy is current.", nil),
			},
			errors: []string{"400", "404"}},
		{method: "DELETE", path: "/fleet/artifacts/{id}", access: operatorOnly, summary: "Delete an artifact",
			description: "Removes the pointer; the bytes go when no other artifact of the product has the same digest.",
			params:      []obj{pathParam("id", "The artifact id.")},
			ok:          map[string]obj{"204": respond("Deleted.", nil)},
			errors:      []string{"400", "404"}},
		{method: "POST", path: "/fleet/jobs/{id}/usage", access: factoryOnly, summary: "Report a run's usage (holder, fenced)",
			description: "The run's usage so far, cumulative: each figure merges by maximum, so a retried or late report changes nothing " +
				"and a lower figure never lowers what was recorded. A report that changes the figures appends a usage event; " +
				"one that passes the run's budget reservation grows the reservation. The final PATCH and /fail may carry the same usage object.",
			params: []obj{jobID}, body: jsonBody(ref("UsageRequest")),
			ok:     map[string]obj{"200": respond("The job, its runReport updated.", ref("Job"))},
			errors: []string{"400", "404", "409", "413"}},

		{method: "POST", path: "/fleet/claim", access: factoryOnly, summary: "Claim the best job (poll transport)",
			description: "Draws from every product the factory's token is scoped to. The body may be empty or {}. " +
				"A requestId (or an Idempotency-Key header) makes it safe to retry: the same id again, from the same factory, " +
				"answers the lease the first try took while the factory still holds it, instead of taking another job.",
			params: []obj{{"name": headerIdempotencyKey, "in": "header", "required": false, "schema": name("The claim's request id, as requestId.")}},
			body: optionalJSONBody(object(nil, obj{
				"requestId": name("The client's id of this claim; the same id on a retry."),
			})),
			ok: map[string]obj{
				"200": respond("A job and its lease.", ref("Claimed")),
				"204": respond("Nothing to claim.", nil),
			},
			errors: []string{"400", "404", "413"}},
		{method: "POST", path: "/fleet/accept", access: factoryOnly, summary: "Accept a dispatched job (push transport)",
			description: "The factory the dispatch message targeted takes the job if dispatchEpoch is still current; 409 means someone else has it.",
			body:        jsonBody(ref("AcceptRequest")),
			ok:          map[string]obj{"200": respond("The job and its lease.", ref("Claimed"))},
			errors:      []string{"400", "404", "409", "413"}},
		{method: "POST", path: "/fleet/fail", access: factoryOnly, summary: "Report a failure (lease released now)",
			description: "retryable: back to the queue after a backoff, or dead_letter when attempts run out; otherwise failed.",
			body:        jsonBody(ref("FailRequest")),
			ok:          map[string]obj{"200": respond("The job after the failure.", ref("Job"))},
			errors:      []string{"400", "404", "409", "413"}},

		{method: "POST", path: "/fleet/factories/enroll", access: operatorOnly, summary: "Enrol a factory",
			description: "Issues the factory's token, shown only in this response. A token scoped to products may enrol only factories serving those products.",
			body:        jsonBody(ref("EnrollRequest")),
			ok:          map[string]obj{"201": respond("Enrolled.", ref("EnrollResponse"))},
			errors:      []string{"400", "409", "413"}},
		{method: "POST", path: "/fleet/factories/heartbeat", access: factoryOnly, summary: "Report a factory's state",
			description: "capabilities and repos replace the stored lists; capabilities must stay within the token's scope.",
			body:        jsonBody(ref("HeartbeatRequest")),
			ok:          map[string]obj{"200": respond("The factory.", ref("Factory"))},
			errors:      []string{"400", "404", "409", "413"}},
		{method: "GET", path: "/fleet/factories", access: operatorOnly, summary: "List factories",
			description: "Those serving x-product-id, or every factory serving a product of the token's scope. To a product-scoped token " +
				"a factory shared with other products shows only the token's products and the repos they own (capabilities, load and health stay).",
			ok: map[string]obj{"200": respond("The factories, by id.", listOf("Factory"))}},
		{method: "DELETE", path: "/fleet/factories/{id}", access: operatorOnly, summary: "Deregister a factory",
			description: "Revokes its token. Jobs it held are reaped when their leases expire.",
			params:      []obj{pathParam("id", "The factory id.")},
			ok:          map[string]obj{"204": respond("Deregistered.", nil)},
			errors:      []string{"400", "404"}},
		{method: "POST", path: "/fleet/factories/{id}/drain", access: operatorOnly, summary: "Drain a factory",
			description: "An extension of the contract: the factory gets no new assignments (dispatch, claim, accept; /explain names it \"factory is draining\") and keeps, renews and finishes the jobs it holds. Jobs already dispatched to it are dispatched elsewhere. Idempotent.",
			params:      []obj{pathParam("id", "The factory id.")},
			ok:          map[string]obj{"200": respond("The factory, draining.", ref("Factory"))},
			errors:      []string{"400", "404", "409"}},
		{method: "POST", path: "/fleet/factories/{id}/undrain", access: operatorOnly, summary: "Put a drained factory back into service",
			description: "Clears draining; waiting jobs are retried at once. Idempotent.",
			params:      []obj{pathParam("id", "The factory id.")},
			ok:          map[string]obj{"200": respond("The factory.", ref("Factory"))},
			errors:      []string{"400", "404", "409"}},
		{method: "POST", path: "/fleet/factories/{id}/token/rotate", access: operatorOrSelf, summary: "Rotate a factory's token",
			description: "Issues a new token and revokes the old one. A factory may rotate its own.",
			params:      []obj{pathParam("id", "The factory id.")},
			ok:          map[string]obj{"200": respond("The new token, shown once.", ref("TokenResponse"))},
			errors:      []string{"400", "404", "409"}},
		{method: "POST", path: "/fleet/factories/{id}/token/revoke", access: operatorOrSelf, summary: "Revoke a factory's token",
			description: "The factory stays enrolled; rotate gives it a new token.",
			params:      []obj{pathParam("id", "The factory id.")},
			ok:          map[string]obj{"204": respond("Revoked.", nil)},
			errors:      []string{"400", "404", "409"}},

		{method: "POST", path: "/fleet/tracker/ingest", access: operatorOnly, summary: "Ingest a tracker item as a job",
			description: "The item's job is the one of idempotencyKey tracker:<source>:<itemId>: the same item again returns it (200). " +
				"A higher revision replaces the manifest of a job that has not started (never assigned: leaseEpoch 0, queued or blocked) and records a tracker_updated event; " +
				"a lower or equal one returns the job unchanged; a higher one after the job started is 409 conflict (field revision). " +
				"X-Fleet-Ingest says which: created, updated or unchanged. The manifest comes as one Markdown string (manifest) or as its fields " +
				"(title, repo, capabilities, ... and body for the task), never both; it must not name an idempotencyKey. Needs a product: x-product-id, or a token scoped to one.",
			body: jsonBody(ref("IngestRequest")),
			ok: map[string]obj{
				"201": withHeader(withHeader(respond("Created.", ref("Job")), "Location", "The job's URL."), ingestOutcomeHeader, "created"),
				"200": withHeader(respond("The item's job, updated to the revision or unchanged.", ref("Job")), ingestOutcomeHeader, "updated or unchanged"),
			},
			errors: []string{"400", "409", "413", "422"}},

		{method: "POST", path: "/fleet/tracker/echo", access: operatorOnly, summary: "Re-send a tracked job's events",
			description: "Starts the job's delivery over from seq 1 (every event is sent again, in order, backoff cleared) and records an echo_resend event, " +
				"whose write wakes the echo function. Answers at once with the delivery state; the sending happens in the echo function. 409 for a job not ingested from a tracker.",
			body:   jsonBody(ref("ResendRequest")),
			ok:     map[string]obj{"202": respond("The delivery state, reset.", ref("EchoState"))},
			errors: []string{"400", "404", "409"}},
		{method: "GET", path: "/fleet/jobs/{id}/echo", access: operatorOnly, summary: "A tracked job's echo delivery state",
			description: "How far delivery of the job's events to its product's tracker webhook got: deliveredSeq (every seq up to it acknowledged, in order), " +
				"pendingSeq (the next to send; null when up to date), lastError and nextAttemptAt (the backoff's next try; null when none). 409 for a job not ingested from a tracker.",
			params: []obj{jobID},
			ok:     map[string]obj{"200": respond("The delivery state.", ref("EchoState"))},
			errors: []string{"400", "404", "409"}},

		{method: "PUT", path: "/fleet/products/{productId}", access: operatorOnly, summary: "Declare a product and its repos",
			description: "repos replaces the list. A repo has one owning product: claiming one another product owns is 409 conflict naming the owner, unless an unscoped operator sets moveRepos. A job whose repo its product does not own is rejected with 422 repo_not_owned. maxRunning caps the product's jobs holding a lease at once (0 or absent: uncapped).",
			params:      []obj{pathParam("productId", "The product id.")},
			body:        jsonBody(ref("ProductRequest")),
			ok:          map[string]obj{"200": respond("The product.", ref("Product"))},
			errors:      []string{"400", "409", "413"}},
		{method: "GET", path: "/fleet/products/{productId}", access: operatorOnly, summary: "Read a product",
			params: []obj{pathParam("productId", "The product id.")},
			ok:     map[string]obj{"200": respond("The product.", ref("Product"))},
			errors: []string{"400", "404"}},
		{method: "PUT", path: "/fleet/budgets/{productId}", access: operatorOnly, summary: "Set a product's budget",
			description: "ceilingUsd is required; period (month or total, default month), alertAt (default 0.8), autoPause (default true) " +
				"and defaultJobUsd (the estimate of a job without budget.usd, default 0) take defaults when absent. Spend, reservations " +
				"and a pause are kept across PUTs. Jobs are only assigned while the product is not paused and spent + reserved + estimate <= ceiling.",
			params: []obj{pathParam("productId", "The product id.")},
			body:   jsonBody(ref("BudgetRequest")),
			ok:     map[string]obj{"200": respond("The budget.", ref("Budget"))},
			errors: []string{"400", "404", "409", "413"}},
		{method: "GET", path: "/fleet/budgets/{productId}", access: operatorOnly, summary: "Read a product's budget",
			params: []obj{pathParam("productId", "The product id.")},
			ok:     map[string]obj{"200": respond("The budget.", ref("Budget"))},
			errors: []string{"400", "404"}},
		{method: "GET", path: "/fleet/budgets/{productId}/burndown", access: operatorOnly, summary: "A budget's burndown",
			description: "The period's cumulative spend at each settled run, and the linear forecast of when it reaches the ceiling (null when it will not this period).",
			params:      []obj{pathParam("productId", "The product id.")},
			ok:          map[string]obj{"200": respond("The burndown.", ref("Burndown"))},
			errors:      []string{"400", "404"}},
		{method: "POST", path: "/fleet/budgets/{productId}/pause", access: operatorOnly, summary: "Pause a product",
			description: "No job of the product is assigned until it is resumed; running jobs finish.",
			params:      []obj{pathParam("productId", "The product id.")},
			body:        optionalJSONBody(ref("PauseRequest")),
			ok:          map[string]obj{"200": respond("The budget.", ref("Budget"))},
			errors:      []string{"400", "404", "409", "413"}},
		{method: "POST", path: "/fleet/budgets/{productId}/resume", access: operatorOnly, summary: "Resume a product",
			description: "Lifts the pause and lets held jobs flow at once (admission still applies).",
			params:      []obj{pathParam("productId", "The product id.")},
			ok:          map[string]obj{"200": respond("The budget.", ref("Budget"))},
			errors:      []string{"400", "404", "409"}},
		{method: "GET", path: "/fleet/repos", access: operatorOnly, summary: "Repos known to the fleet",
			description: "Each with the products owning it and the factories holding it; limited to x-product-id or the token's scope.",
			ok:          map[string]obj{"200": respond("The repos, by name.", listOf("RepoInfo"))}},

		{method: "PUT", path: "/fleet/profiles/{name}", access: operatorOnly, summary: "Put a new version of a persona profile",
			description: "The profile is Markdown with YAML front matter (capabilities, engine, budget; name, if given, must match the path) " +
				"and the persona's instructions as the body, sent raw (text/markdown) or as " + `{"profile": "..."}` + ". " +
				"Every PUT creates the next immutable version, which becomes the latest; earlier versions never change. " +
				"A job submitted with persona: <name> snapshots the latest version (profile: {name, version, capabilities, body}), " +
				"gets its capabilities merged into its own and its engine and budget where the manifest is silent. Needs a product.",
			params: []obj{pathParam("name", "The profile's name.")},
			body: obj{"required": true, "content": obj{
				"text/markdown":    obj{"schema": obj{"type": "string"}},
				"application/json": obj{"schema": ref("ProfileRequest")},
			}},
			ok:     map[string]obj{"201": withHeader(respond("The new version.", ref("Profile")), "Location", "The version's URL.")},
			errors: []string{"400", "409", "413"}},
		{method: "GET", path: "/fleet/profiles", access: operatorOnly, summary: "List a product's profiles",
			description: "The latest version of each, by name, without instructions. Needs a product.",
			ok:          map[string]obj{"200": respond("The profiles.", listOf("ProfileSummary"))},
			errors:      []string{"400"}},
		{method: "GET", path: "/fleet/profiles/{name}", access: operatorOnly, summary: "Read a profile",
			description: "The latest version, or the one ?version= names. Needs a product.",
			params: []obj{pathParam("name", "The profile's name."),
				queryParam("version", "A version number; the latest without it.", obj{"type": "integer", "minimum": 1})},
			ok:     map[string]obj{"200": respond("The profile version.", ref("Profile"))},
			errors: []string{"400", "404"}},
		{method: "GET", path: "/fleet/profiles/{name}/versions", access: operatorOnly, summary: "A profile's versions",
			description: "Every version, oldest first, without instructions. Needs a product.",
			params:      []obj{pathParam("name", "The profile's name.")},
			ok:          map[string]obj{"200": respond("The versions.", listOf("ProfileSummary"))},
			errors:      []string{"400", "404"}},

		{method: "GET", path: "/fleet/metrics", access: operatorOnly, summary: "The fleet at a glance",
			description: "For x-product-id, or the whole fleet for an unscoped token. A token scoped to several products must name one.",
			ok:          map[string]obj{"200": respond("The metrics.", ref("Metrics"))},
			errors:      []string{"400"}},
		{method: "GET", path: "/fleet/queue-state", access: anyPrincipal, summary: "A product's queue version",
			description: "Bumped whenever a job enters queued: a polling factory claims only when it moved. Needs a product.",
			ok:          map[string]obj{"200": respond("The queue state.", ref("QueueState"))},
			errors:      []string{"400"}},
	}
}

func withHeader(r obj, header, desc string) obj {
	r["headers"] = obj{header: obj{"schema": obj{"type": "string"}, "description": desc}}
	return r
}

// Schema helpers.

func ref(n string) obj { return obj{"$ref": "#/components/schemas/" + n} }

// describe returns a copy of o with the description: schemas such as
// usageSchema are shared between several properties, so writing into o
// would give every use the last description (and race when two documents
// are built at once).
func describe(o obj, desc string) obj {
	if desc == "" {
		return o
	}
	c := maps.Clone(o)
	c["description"] = desc
	return c
}

func str(desc string) obj      { return describe(obj{"type": "string"}, desc) }
func integer(desc string) obj  { return describe(obj{"type": "integer"}, desc) }
func number(desc string) obj   { return describe(obj{"type": "number"}, desc) }
func boolean(desc string) obj  { return describe(obj{"type": "boolean"}, desc) }
func dateTime(desc string) obj { return describe(obj{"type": "string", "format": "date-time"}, desc) }
func stringList(desc string) obj {
	return describe(obj{"type": "array", "items": obj{"type": "string"}}, desc)
}

// boundedList is a list a client sends: at most max entries (counted as
// sent, duplicates included; a longer list is 400 naming the field).
func boundedList(desc string, max int) obj {
	l := stringList(desc)
	l["maxItems"] = max
	return l
}
func arrayOf(items obj) obj { return obj{"type": "array", "items": items} }

// eventProps are the fields of a job event.
func eventProps() obj {
	return obj{
		"id": str(""), "jobId": str(""), "productId": str(""), "seq": integer(""), "type": eventType,
		"from": ref("Stage"), "to": ref("Stage"), "actor": enum("", "factory", "operator", "system"),
		"actorId": str(""), "message": str(""), "data": obj{"description": "Free-form JSON."}, "at": dateTime(""),
	}
}

// name is a plain name: a job, factory, product or repo id.
func name(desc string) obj {
	return describe(obj{"type": "string", "pattern": `^[A-Za-z0-9_][A-Za-z0-9._-]*$`, "maxLength": fleet.MaxNameLen}, desc)
}

// eventType is the schema of an event's type: fleet.EventTypes.
var eventType = func() obj {
	values := make([]string, len(fleet.EventTypes))
	for i, t := range fleet.EventTypes {
		values[i] = string(t)
	}
	return enum("What the event records.", values...)
}()

// unroutableKind is the schema of a job's dispatch.unroutableKind.
var unroutableKind = enum("no_factory: nothing in the fleet can run the job (it needs a change); busy: factories could, but none can now; "+
	"budget: its product's budget holds it back (paused, or no room under the ceiling); seat_cap: its product runs maxRunning jobs already.",
	string(fleet.UnroutableNoFactory), string(fleet.UnroutableBusy), string(fleet.UnroutableBudget), string(fleet.UnroutableSeatCap))

// holdSchema is fleet.Hold, why admission holds a queued job back;
// running and maxRunning are a seat_cap hold's.
func holdSchema(required []string, desc string, kinds ...string) obj {
	return object(required, obj{
		"kind": enum(desc, kinds...), "message": str(""),
		"running": integer("seat_cap: seats taken."), "maxRunning": integer("seat_cap: the product's cap."),
	})
}

// usageSchema is fleet.Usage.
var usageSchema = object([]string{"usd", "inputTokens", "outputTokens"}, obj{
	"usd": number("Cumulative cost in USD."), "inputTokens": integer(""), "outputTokens": integer(""),
})

// diffSchema is fleet.DiffStat.
var diffSchema = object([]string{"files", "insertions", "deletions"}, obj{
	"files": integer(""), "insertions": integer(""), "deletions": integer(""),
})

func enum(desc string, values ...string) obj {
	return describe(obj{"type": "string", "enum": values}, desc)
}

// object is a response object: clients must tolerate fields added later.
func object(required []string, props obj) obj {
	o := obj{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

// request is a request object: the server refuses unknown fields.
func request(required []string, props obj) obj {
	o := object(required, props)
	o["additionalProperties"] = false
	return o
}

func listOf(item string) obj { return object([]string{"items"}, obj{"items": arrayOf(ref(item))}) }

func stageNames() []string {
	out := make([]string, len(fleet.Stages))
	for i, s := range fleet.Stages {
		out[i] = string(s)
	}
	return out
}

func schemas() obj {
	terms := obj{}
	for _, t := range []string{"capabilityFit", "affinity", "load", "costFit", "health", "starvation"} {
		terms[t] = number("")
	}
	return obj{
		"Error": object([]string{"error"}, obj{"error": object([]string{"code", "message"}, obj{
			"code": enum("", string(fleet.CodeInvalid), string(fleet.CodeUnauthenticated), string(fleet.CodeForbidden),
				string(fleet.CodeNotFound), string(codeMethodNotAllowed), string(fleet.CodeConflict), string(fleet.CodeFenced),
				string(fleet.CodeTooLarge), string(fleet.CodeRepoNotOwned), string(fleet.CodeBudgetExceeded),
				string(fleet.CodePaused), string(fleet.CodeThrottled), string(fleet.CodeUnavailable), string(codeInternal)),
			"message": str("A sentence for people."),
			"field":   str("The JSON path (or header, or query parameter) at fault, when one is."),
		})}),
		"Health": object([]string{"status"}, obj{"status": enum("", "ok")}),
		"Stage":  enum("", stageNames()...),
		"Job": object([]string{"id", "productId", "title", "repo", "capabilities", "priority", "stage", "leaseEpoch",
			"dispatchEpoch", "targetFactoryId", "attempts", "deps", "createdAt", "updatedAt"}, obj{
			"id":           name(""),
			"productId":    name(""),
			"title":        str(""),
			"repo":         name(""),
			"capabilities": boundedList("kind:value tokens the factory must hold.", fleet.MaxCapabilities),
			"persona":      str("The persona (profile name) the manifest named."),
			"profile": object([]string{"name", "version", "capabilities", "body"}, obj{
				"name": name(""), "version": integer("The profile version snapshotted at submit; re-runs keep it."),
				"capabilities": stringList("Capabilities the profile added to the manifest's."),
				"body":         str("The persona's instructions, handed to the engine."),
			}),
			"priority":        enum("", "low", "normal", "high", "critical"),
			"stage":           ref("Stage"),
			"body":            str("The task, Markdown, verbatim."),
			"leaseEpoch":      integer("Bumped by every claim and revocation; worker calls carry it as a fence."),
			"holderFactoryId": str("The factory holding the lease; absent when none does."),
			"leaseExpiresAt":  dateTime(""),
			"leaseAcquiredAt": dateTime(""),
			"claimRequestId":  str("The request id of the poll claim that took the current lease."),
			"dispatchEpoch":   integer("Bumped by every dispatch decision; accept carries it."),
			"targetFactoryId": str("Where the dispatcher sent the job; empty while undecided."),
			"dispatch": object(nil, obj{"at": dateTime(""), "unroutable": str("Why no factory was eligible."),
				"unroutableKind": unroutableKind, "deadLettered": integer("")}),
			"checkpoint":       str("The holder's last checkpoint, kept across requeues."),
			"cancelRequested":  boolean("A cancel waits for the holder's acknowledgement."),
			"preemptRequested": boolean("A preemption waits for the holder's release."),
			"stopRequestedAt":  dateTime("When the pending cancel or preemption was asked; the grace runs from it."),
			"preemptedBy":      object([]string{"productId", "jobId"}, obj{"productId": name(""), "jobId": name("")}),
			"attempts":         integer("Retryable failures so far."),
			"maxAttempts":      integer(""),
			"notBefore":        dateTime("Not claimable before this (retry backoff)."),
			"lastFailure":      object(nil, obj{"reason": str(""), "retryable": boolean(""), "factoryId": str(""), "at": dateTime("")}),
			"parentId":         str("The job it is a child of (POST /fleet/jobs/{id}/children)."),
			"deps":             boundedList("Job ids that must ship first.", fleet.MaxDeps),
			"depsMode":         enum("", "all", "any"),
			"hasDependants":    boolean(""),
			"budget":           object(nil, obj{"wall": str("A duration such as 45m0s."), "usd": number("")}),
			"review":           ref("Review"),
			"kind":             enum("task (the default, omitted) runs its own step; composite ships when every child has.", "composite"),
			"rootId":           str("The root of the job's tree of children; absent on a root."),
			"depth":            integer("Levels below the root (0 for a root)."),
			"children":         stringList("The jobs posted as its children; while blocked it waits until every one shipped."),
			"idempotencyKey":   str(""),
			"tracker": object([]string{"source", "itemId", "revision"}, obj{
				"source": name("The tracker."), "itemId": str("The item's id there."), "revision": integer("The item's revision the job carries."),
			}),
			"runReport": object([]string{"leaseEpoch", "usage"}, obj{
				"leaseEpoch": integer("The run (lease epoch) reported on."), "engine": str(""), "usage": usageSchema,
				"head": str("The commit delivered."), "diff": diffSchema,
			}),
			"queuedAt": dateTime(""),
			"eventSeq": integer("The seq of the job's latest event."),
			"recentEvents": describe(arrayOf(ref("RecentEvent")), "The job's latest events (up to 8, seq ending at eventSeq), "+
				"committed with the changes they record; GET /fleet/jobs/{id}/events lists them all."),
			"createdAt": dateTime(""),
			"updatedAt": dateTime(""),
		}),
		"Review": object([]string{"approvals"}, obj{
			"reviewers": boundedList("Operator names who may vote; empty means any operator.", fleet.MaxReviewers),
			"quorum":    integer("Approvals of distinct reviewers that pass the gate."),
			"onReject":  enum("requeue (default): back to the queue with the comment as feedback, no attempt spent; fail: failed.", "requeue", "fail"),
			"head":      str("The checkpoint under review (e.g. aq/job/<id>@<sha>); votes are bound to it, a new head clears them."),
			"votes": arrayOf(object([]string{"reviewer", "approve", "at"}, obj{"reviewer": str(""), "approve": boolean(""),
				"comment": str(""), "head": str(""), "at": dateTime("")})),
			"approvals": integer("Distinct reviewers approving head."),
			"awaiting":  stringList("Listed reviewers who have not voted on head."),
			"feedback":  str("The comment of the rejection that sent the job back, for its next attempt."),
			"minimum": describe(object([]string{"quorum"}, obj{"reviewers": stringList(""), "quorum": integer("")}),
				"The gate as the manifest set it, recorded when an operator first changes the gate: a change may add reviewers "+
					"or raise the quorum, never go below it."),
		}),
		"WaitItem": object([]string{"id", "stage"}, obj{"id": name(""), "stage": ref("Stage")}),
		"DAG": object([]string{"rootId", "nodes", "edges", "counts"}, obj{
			"rootId": name("The root of the tree."),
			"nodes": arrayOf(object([]string{"id", "title", "stage", "deps", "depsMode"}, obj{
				"id": name(""), "title": str(""), "stage": ref("Stage"), "kind": enum("", "composite"),
				"parentId": str(""), "deps": stringList(""), "depsMode": enum("", "all", "any"),
			})),
			"edges": arrayOf(object([]string{"from", "to", "kind"}, obj{"from": name(""), "to": name(""),
				"kind": enum("child: from the parent to the child; dep: from the dependency to the job waiting on it.", coord.EdgeChild, coord.EdgeDep)})),
			"counts": describe(obj{"type": "object", "additionalProperties": obj{"type": "integer"}}, "Nodes per stage."),
		}),
		"JobPage": object([]string{"items", "cursor"}, obj{"items": arrayOf(ref("Job")),
			"cursor": str("Pass as cursor for the next page; empty on the last page.")}),
		"Claimed": object([]string{"job", "leaseEpoch", "leaseExpiresAt"}, obj{
			"job": ref("Job"), "leaseEpoch": integer(""), "leaseExpiresAt": dateTime("")}),
		"RenewResponse": object([]string{"leaseExpiresAt", "cancelRequested", "preemptRequested"}, obj{"leaseExpiresAt": dateTime(""),
			"cancelRequested":  boolean("An operator cancelled the job: stop, checkpoint, release with outcome cancelled."),
			"preemptRequested": boolean("A critical job needs the seat: stop, checkpoint, release with outcome preempted.")}),
		"Run": object([]string{"id", "jobId", "factoryId", "leaseEpoch", "result", "startedAt"}, obj{
			"id": str("jobId:leaseEpoch"), "jobId": str(""), "productId": str(""), "factoryId": str(""),
			"leaseEpoch": integer(""), "result": enum("", "running", "succeeded", "failed", "lost", "cancelled", "preempted"),
			"reason": str(""), "startedAt": dateTime(""), "endedAt": dateTime(""),
			"engine": str("The engine the holder reported."), "usage": usageSchema,
			"head": str("The commit the run delivered."), "diff": diffSchema,
		}),
		"Event": object([]string{"id", "jobId", "seq", "type", "actor", "at"}, eventProps()),
		// A job's own copy of its latest events: the same fields less the
		// ones the job names (id, jobId, productId).
		"RecentEvent": object([]string{"seq", "type", "actor", "at"}, eventProps()),
		"Artifact": object([]string{"id", "jobId", "productId", "runId", "name", "kind", "contentType", "size", "sha256", "createdAt"}, obj{
			"id": str("<jobId>.<suffix>"), "jobId": name(""), "productId": name(""),
			"runId": str("The run (jobId:leaseEpoch) that uploaded it; empty for an operator's."),
			"name":  name(""), "kind": enum("", "log", "diff", "report", "other"), "contentType": str(""),
			"size": integer("Bytes."), "sha256": str("Lower-case hex digest of the bytes."), "createdAt": dateTime(""),
		}),
		"Explanation": object([]string{"jobId", "stage", "dispatchEpoch", "schedule"}, obj{
			"jobId": str(""), "stage": ref("Stage"), "targetFactoryId": str(""), "dispatchEpoch": integer(""),
			"dispatch": object(nil, obj{"at": dateTime(""), "unroutable": str(""), "unroutableKind": unroutableKind,
				"deadLettered": integer("")}),
			"profile": object([]string{"name", "version", "capabilities"}, obj{
				"name": name(""), "version": integer(""), "capabilities": stringList("Required capabilities that came from the job's profile."),
			}),
			"review": ref("Review"),
			"waiting": object([]string{"depsMode", "deps", "children"}, obj{
				"depsMode": enum("", "all", "any"),
				"deps":     arrayOf(ref("WaitItem")), "children": arrayOf(ref("WaitItem")),
			}),
			"budget": holdSchema([]string{"kind", "message"}, "Why the product's budget holds the queued job back now.",
				string(fleet.HoldPaused), string(fleet.HoldCeiling)),
			"seatCap": holdSchema([]string{"kind", "message", "running", "maxRunning"},
				"The product's maxRunning seats are all taken: the queued job waits for one to free.", string(fleet.HoldSeatCap)),
			"schedule": object([]string{"jobId", "routable", "required", "candidates"}, obj{
				"jobId": str(""), "routable": boolean(""), "reason": str("Why no factory is eligible."),
				"best": str("The factory the scheduler would pick."), "required": stringList("Capabilities checked, with repo:<repo>."),
				"candidates": arrayOf(object([]string{"factoryId", "eligible", "load", "leases", "reported"}, obj{
					"factoryId": str(""), "eligible": boolean(""),
					"reason":     str("Why it failed the hard filter, e.g. \"no free seat (leases 1, reported 0 of 1)\"."),
					"load":       integer("The seats the scheduler counts taken: the larger of leases + dispatched and reported."),
					"leases":     integer("The live leases the coordinator holds for the factory."),
					"reported":   integer("The load the factory last reported in a heartbeat."),
					"dispatched": integer("Dispatches this coordinator sent the factory that it has not taken yet."),
					"terms":      object(nil, terms), "total": number("Σ weight × term."),
				})),
			}),
		}),
		"Factory": object([]string{"id", "kind", "products", "capabilities", "repos", "seatLimit", "load", "health"}, obj{
			"id": name(""), "kind": enum("", "static", "elastic"), "productId": str("Its first product, or * for all."),
			"products": stringList("Products it serves; empty means every product."), "capabilities": stringList(""),
			"repos": stringList("Repos it has checked out."), "seatLimit": integer(""), "load": integer(""),
			"health": enum("", "ok", "degraded", "stale", "down"), "costPerHourUsd": number(""),
			"draining": boolean("True while an operator drains it (POST .../drain): no new assignments."),
			"tokenId":  str("The SHA-256 of its current token (not secret)."), "lastHeartbeatAt": dateTime(""),
			"enrollment": str("Names this enrollment of the id: deregistering revokes its tokens, not those of a later enrollment."),
			"enrolledAt": dateTime(""), "updatedAt": dateTime(""),
		}),
		"Product": object([]string{"id", "repos", "maxRunning"}, obj{
			"id": name(""), "productId": name(""), "name": str(""), "repos": stringList("Repos it owns."),
			"tracker": object([]string{"webhookUrl", "secretSet"}, obj{
				"webhookUrl": str("Where the events of its tracked jobs are POSTed."),
				"secretSet":  boolean("A signing secret is set; the secret itself is never returned."),
			}),
			"maxRunning": integer("The seat cap: at most this many of its jobs hold a lease at once; 0: uncapped."),
			"seats": describe(obj{"type": "object", "additionalProperties": object([]string{"leaseEpoch", "at"}, obj{
				"leaseEpoch": integer(""), "at": dateTime("When the seat was taken."),
			})}, "The leases counted against maxRunning, by job id (capped products only)."),
			"createdAt": dateTime(""), "updatedAt": dateTime(""),
		}),
		"Profile": object([]string{"name", "productId", "version", "capabilities", "budget", "body", "createdAt"}, obj{
			"name": name(""), "productId": name(""), "version": integer("1 for the first PUT, one more for each after."),
			"capabilities": boundedList("Required of any factory running a job under this profile.", fleet.MaxCapabilities),
			"engine":       str("The engine (engine:<engine>) a job gets when its manifest names none."),
			"budget":       object(nil, obj{"wall": str("A duration such as 45m0s."), "usd": number("")}),
			"body":         describe(obj{"type": "string", "maxLength": fleet.MaxProfileBodyBytes}, "The persona's instructions, Markdown."),
			"createdBy":    str("The operator who put this version."), "createdAt": dateTime(""),
		}),
		"ProfileSummary": object([]string{"name", "productId", "version", "capabilities", "budget", "bodyBytes", "createdAt"}, obj{
			"name": name(""), "productId": name(""), "version": integer(""), "capabilities": stringList(""),
			"engine": str(""), "budget": object(nil, obj{"wall": str(""), "usd": number("")}),
			"bodyBytes": integer("The size of the instructions."), "createdBy": str(""), "createdAt": dateTime(""),
		}),
		"RepoInfo": object([]string{"repo", "products", "factories"}, obj{
			"repo": name(""), "products": stringList("Products owning it."), "factories": stringList("Factories holding it."),
		}),
		"QueueState": object([]string{"productId", "version"}, obj{"id": str(""), "productId": str(""), "version": integer("")}),
		"Metrics": object([]string{"at", "factories", "jobs", "starving", "alerts"}, obj{
			"at": dateTime(""),
			"factories": object(nil, obj{"total": integer(""), "byHealth": obj{"type": "object", "additionalProperties": obj{"type": "integer"}},
				"seats": integer(""), "load": integer(""), "utilization": number("")}),
			"jobs":     describe(obj{"type": "object", "additionalProperties": obj{"type": "integer"}}, "Active jobs by stage."),
			"starving": arrayOf(object(nil, obj{"jobId": str(""), "productId": str(""), "waitingFor": str(""), "reason": str("")})),
			"alerts": arrayOf(object([]string{"kind", "severity", "subject", "since", "message"}, obj{
				"kind": enum("What the alert is about.", "starving", "stale_factory", "dead_letter", "blocked_on_failed", string(fleet.AlertCancelUnacknowledged),
					string(fleet.AlertBudgetAlert), string(fleet.AlertBudgetPaused)),
				"severity": enum("", "warning", "critical"),
				"subject":  str("What it names: product/repo (starving), a factory id (stale_factory), product/job (dead_letter, blocked_on_failed), a product (budget_alert, budget_paused)."),
				"since":    dateTime("When the condition began."),
				"message":  str("A sentence for a person."),
			})),
			"coordinator": describe(obj{"type": "object", "additionalProperties": obj{"type": "number"}},
				"This process's counters: claims, conflicts, lags. Fleet-wide: absent for a product-scoped token."),
			"adapters": describe(obj{"type": "object", "additionalProperties": obj{"type": "object"}},
				"What the store and the dispatch transport report, by name: operation counts, request charges, subscription depths. Fleet-wide: absent for a product-scoped token."),
		}),
		"EnrollResponse": object([]string{"factoryId", "token", "factory"}, obj{
			"factoryId": name(""), "token": str("The factory's bearer token; shown only here."), "factory": ref("Factory")}),
		"TokenResponse": object([]string{"factoryId", "token"}, obj{"factoryId": name(""), "token": str("Shown only here.")}),

		"ResendRequest": request([]string{"jobId"}, obj{"jobId": name("A job ingested from a tracker item.")}),
		"EchoState": object([]string{"jobId", "deliveredSeq", "pendingSeq", "latestSeq", "attempts", "lastError", "nextAttemptAt"}, obj{
			"jobId":         name(""),
			"deliveredSeq":  integer("Every event up to this seq was acknowledged by the webhook, in order."),
			"pendingSeq":    describe(obj{"type": []string{"integer", "null"}}, "The next seq to send; null when every event so far was delivered."),
			"latestSeq":     integer("The job's latest event."),
			"attempts":      integer("Failures in a row; the backoff doubles with each."),
			"lastError":     describe(obj{"type": []string{"string", "null"}}, "The class of the last failure (connection_refused, timeout, dns, refused_address, tls, http_4xx, http_5xx, bad_response, circuit_open, event_missing, ...), never what the far end said; null after a delivery."),
			"nextAttemptAt": describe(obj{"type": []string{"string", "null"}, "format": "date-time"}, "When the next attempt is due; null when none is pending."),
		}),
		"IngestRequest": describe(obj{"type": "object", "required": []string{"source", "itemId", "revision"}, "properties": obj{
			"source":   name("The tracker (jira, github, ...): part of the idempotency key, so a plain name."),
			"itemId":   describe(obj{"type": "string", "maxLength": fleet.MaxTrackerItemIDLen}, "The item's id in its tracker, one line."),
			"revision": describe(obj{"type": "integer", "minimum": 1}, "The item's revision; a higher one updates a job that has not started."),
			"manifest": describe(obj{"type": "string", "maxLength": fleet.MaxManifestBytes}, "The Markdown manifest; or leave it out and send its fields."),
			"body":     str("With the manifest's fields: the task, Markdown."),
		}, "additionalProperties": true}, "Either manifest, or the manifest's front-matter fields (title, repo, capabilities, persona, priority, budget, deps, depsMode, kind, review, maxAttempts) and body."),
		"SubmitRequest": request([]string{"manifest"}, obj{"manifest": describe(obj{"type": "string", "maxLength": fleet.MaxManifestBytes},
			"The Markdown manifest with YAML front matter.")}),
		"PatchRequest": request([]string{"leaseEpoch"}, obj{
			"stage":      enum("building, review, testing or shipped; omit to set only the checkpoint.", stageNames()...),
			"leaseEpoch": integer("The epoch the claim returned."),
			"checkpoint": describe(obj{"type": "string", "maxLength": 1024}, ""),
			"usage":      describe(usageSchema, "The run's usage so far (cumulative; see POST /fleet/jobs/{id}/usage)."),
			"head":       name("The commit the run delivered."),
			"diff":       describe(diffSchema, "The delivered change's git diff --shortstat against its base."),
		}),
		"ChildrenRequest": request([]string{"children"}, obj{
			"leaseEpoch": integer("The holder's epoch: required from a factory, refused from an operator."),
			"children": describe(obj{"type": "array", "maxItems": fleet.MaxChildrenPerRequest, "items": obj{"oneOf": []obj{
				{"type": "string", "description": "A manifest."}, ref("SubmitRequest")}}}, "The children's manifests."),
		}),
		"ReviewRequest": request(nil, obj{
			"leaseEpoch": integer("The holder's epoch: required from a factory, refused from an operator."),
			"reviewers":  boundedList("Operator only: replaces the reviewers (operator names); every reviewer of the manifest must stay.", fleet.MaxReviewers),
			"quorum":     describe(obj{"type": "integer", "minimum": 1}, "Operator only: approvals needed, at least the manifest's; without it a new reviewers list needs all of them."),
			"head":       describe(obj{"type": "string", "maxLength": 1024}, "The checkpoint to review; a new head clears the votes. The holder's default is its checkpoint."),
		}),
		"VoteRequest": request([]string{"approve", "head"}, obj{
			"approve": boolean("true approves head; false rejects it."),
			"comment": describe(obj{"type": "string", "maxLength": fleet.MaxReviewCommentLen}, "Kept as review.feedback on a rejection."),
			"head":    describe(obj{"type": "string", "maxLength": 1024}, "The review.head voted on; another head is 409."),
		}),
		"ActionRequest": request(nil, obj{"reason": describe(obj{"type": "string", "maxLength": 2000}, "")}),
		"LeaseRequest":  request([]string{"leaseEpoch"}, obj{"leaseEpoch": integer("The epoch the claim returned.")}),
		"ReleaseRequest": request([]string{"leaseEpoch"}, obj{"leaseEpoch": integer("The epoch the claim returned."),
			"outcome":    enum("Absent for a plain release.", "cancelled", "preempted"),
			"checkpoint": str("Where the holder's work is (aq/wip/<id>), recorded on the job.")}),
		"AcceptRequest": request([]string{"jobId", "dispatchEpoch"}, obj{
			"jobId": name(""), "dispatchEpoch": integer("From the dispatch message."),
			"productId": name("From the dispatch message; saves a lookup when x-product-id is absent."),
		}),
		"FailRequest": request([]string{"jobId", "leaseEpoch", "reason", "retryable"}, obj{
			"jobId": name(""), "leaseEpoch": integer(""), "reason": describe(obj{"type": "string"}, fmt.Sprintf(
				"Never refused for its text: stored with control characters escaped, cut to %d bytes.", fleet.MaxReasonLen)),
			"retryable": boolean("true: retry after a backoff; false: fail for good."),
			"productId": name("Saves a lookup when x-product-id is absent."),
			"usage":     describe(usageSchema, "The run's final usage, when known."),
		}),
		"UsageRequest": request([]string{"leaseEpoch", "usd"}, obj{
			"leaseEpoch": integer("The epoch the claim returned."), "usd": describe(obj{"type": "number", "minimum": 0}, "Cumulative USD."),
			"inputTokens": describe(obj{"type": "integer", "minimum": 0}, "Cumulative."), "outputTokens": describe(obj{"type": "integer", "minimum": 0}, "Cumulative."),
			"engine": name("The engine running the job."),
		}),
		"BudgetRequest": request([]string{"ceilingUsd"}, obj{
			"ceilingUsd":    describe(obj{"type": "number", "exclusiveMinimum": 0}, "The most the product may spend per period."),
			"period":        enum("Default month (calendar month, UTC).", string(fleet.PeriodMonth), string(fleet.PeriodTotal)),
			"alertAt":       describe(obj{"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "budget_alert once spend reaches this fraction of the ceiling; default 0.8."),
			"autoPause":     boolean("Pause the product when spend reaches the ceiling; default true."),
			"defaultJobUsd": describe(obj{"type": "number", "minimum": 0}, "The estimate of a job that names no budget.usd; default 0."),
		}),
		"PauseRequest": request(nil, obj{"reason": describe(obj{"type": "string", "maxLength": 2000}, "Why, for people.")}),
		"Budget": object([]string{"productId", "ceilingUsd", "period", "periodStart", "spentUsd", "reservedUsd", "remainingUsd",
			"paused", "pausedReason", "alertAt", "autoPause", "updatedAt"}, obj{
			"productId": name(""), "ceilingUsd": number(""), "period": enum("", string(fleet.PeriodMonth), string(fleet.PeriodTotal)),
			"periodStart": dateTime(""), "spentUsd": number("Settled spend this period."),
			"reservedUsd":  number("Estimates held for runs admitted and not yet settled."),
			"remainingUsd": number("ceiling - spent - reserved, at least 0."), "paused": boolean(""),
			"pausedReason": describe(obj{"type": []string{"string", "null"}, "enum": []any{string(fleet.PausedBudgetExhausted), string(fleet.PausedOperator), nil}}, ""),
			"pauseMessage": str("The operator's reason, or the spend that paused it."),
			"alertAt":      number(""), "autoPause": boolean(""), "defaultJobUsd": number(""), "updatedAt": dateTime(""),
		}),
		"Burndown": object([]string{"productId", "ceilingUsd", "periodStart", "points", "forecastExhaustedAt"}, obj{
			"productId": name(""), "ceilingUsd": number(""), "periodStart": dateTime(""),
			"points":              arrayOf(object([]string{"at", "spentUsd"}, obj{"at": dateTime(""), "spentUsd": number("Cumulative spend of the period.")})),
			"forecastExhaustedAt": describe(obj{"type": []string{"string", "null"}, "format": "date-time"}, "null when spend will not reach the ceiling this period."),
		}),
		"EnrollRequest": request([]string{"factoryId"}, obj{
			"factoryId": name(""), "kind": enum("Default static.", "static", "elastic"),
			"products":       boundedList("Products it serves; empty or absent means every product.", fleet.MaxProducts),
			"capabilities":   boundedList("kind:value, such as os:linux or engine:claude; also the token's capability scope.", fleet.MaxCapabilities),
			"seatLimit":      describe(obj{"type": "integer", "minimum": 0, "maximum": 1000}, "0 means 1."),
			"costPerHourUsd": describe(obj{"type": "number", "minimum": 0}, ""),
		}),
		"HeartbeatRequest": request([]string{"capabilities", "repos"}, obj{
			"capabilities": boundedList("Replaces the stored list; [] for none.", fleet.MaxCapabilities),
			"repos":        boundedList("Replaces the stored list; [] for none.", fleet.MaxRepos),
			"load":         describe(obj{"type": "integer", "minimum": 0}, "Jobs running now."),
			"health":       enum("Default ok.", "ok", "degraded", "down"),
			"seatLimit":    describe(obj{"type": "integer", "minimum": 0, "maximum": 1000}, "0 leaves it unchanged."),
		}),
		"ProfileRequest": request([]string{"profile"}, obj{"profile": str("The Markdown profile: front matter and instructions.")}),
		"ProductRequest": request([]string{"repos"}, obj{"name": describe(obj{"type": "string", "maxLength": fleet.MaxNameLen}, ""),
			"repos":     boundedList("The repos it owns; replaces the list. A repo another product owns is 409 naming the owner.", fleet.MaxRepos),
			"moveRepos": boolean("Take repos other products own (they stop listing them). Unscoped operators only; default false."),
			"tracker": describe(request([]string{"webhookUrl"}, obj{
				"webhookUrl": describe(obj{"type": "string", "maxLength": fleet.MaxWebhookURLLen}, "An absolute http or https URL without credentials."),
				"secret": describe(obj{"type": "string", "minLength": fleet.MinSecretLen, "maxLength": fleet.MaxSecretLen},
					"The HMAC-SHA256 key deliveries are signed with; required when none is set, kept when left out. Never returned."),
			}), "The echo target of the product's tracked jobs; null removes it, absent keeps it."),
			"maxRunning": describe(obj{"type": "integer", "minimum": 0, "maximum": fleet.MaxMaxRunning},
				"At most this many of the product's jobs hold a lease at once (claim, accept and dispatch wait for a seat); 0 or absent: uncapped.")}),
	}
}
