package httpapi

import (
	"fmt"

	"github.com/gigafactory/fleet/shared/api"

	"github.com/gigafactory/fleet/shared/fleet"
)

// route is one entry of the API, declared once: the mux serves it (access,
// query parameters, stream caps, handler) and the OpenAPI document
// describes it (openapi.go), both from this table, so neither can drift.
type route struct {
	method  string
	pattern string // a net/http ServeMux pattern path, under /api
	access  access
	// needsProduct: the route acts in one product, x-product-id or the
	// token's only one; without either it is 400 naming x-product-id
	// before the handler runs. Other routes find their product themselves
	// (from the job or artifact they name, or {productId}) or work across
	// the token's products, which x-product-id narrows.
	needsProduct bool
	// params are its path, query and header parameters, in the order the
	// document lists them; a query parameter not listed here is 400.
	params []param
	// long says which of its requests count against the stream caps.
	long   longLived
	handle handlerFunc

	// What the document says of it beyond the above.
	summary     string
	description string
	body        obj            // the request body, or nil
	ok          map[string]obj // the success responses, by status
	// errors are the statuses beyond those every authenticated route may
	// answer (401, 403, 429, 500, 503).
	errors []string
}

// paramIn is where a parameter travels.
type paramIn string

const (
	inPath   paramIn = "path"
	inQuery  paramIn = "query"
	inHeader paramIn = "header"
)

// param is one parameter of a route.
type param struct {
	name     string
	in       paramIn
	required bool
	schema   obj
	desc     string
}

func pathParam(n, desc string) param {
	return param{name: n, in: inPath, required: true, schema: name(""), desc: desc}
}

func queryParam(n, desc string, schema obj) param {
	return param{name: n, in: inQuery, schema: schema, desc: desc}
}

func headerParam(n, desc string, schema obj) param {
	return param{name: n, in: inHeader, schema: schema, desc: desc}
}

var jobID = pathParam("id", "The job id.")

// queryNames are the query parameters the route takes.
func (rt route) queryNames() []string {
	var names []string
	for _, p := range rt.params {
		if p.in == inQuery {
			names = append(names, p.name)
		}
	}
	return names
}

// apiPrefix is where the Functions host mounts HTTP routes.
const apiPrefix = "/api"

// routes is every route the API serves.
var routes = []route{
	{method: "GET", pattern: "/api/healthz", access: public, handle: (*server).healthz, summary: "Liveness",
		description: "Answers while the process serves HTTP; it does not touch the store.",
		ok:          map[string]obj{"200": respond("Alive.", ref("Health"))}},
	{method: "GET", pattern: "/api/openapi.json", access: public, handle: (*server).openAPI, summary: "This document",
		ok: map[string]obj{"200": respond("The OpenAPI 3.1 document.", obj{"type": "object"})}},

	{method: "POST", pattern: "/api/fleet/jobs", access: operatorOnly, needsProduct: true, handle: (*server).submitJob, summary: "Submit a job",
		description: "The manifest is Markdown with YAML front matter, sent raw (text/markdown) or as " +
			`{"manifest": "..."}` + " (application/json). Needs a product: x-product-id, or a token scoped to one. " +
			"The same idempotencyKey again returns the existing job with 200.",
		body: obj{"required": true, "content": obj{
			"text/markdown":    obj{"schema": obj{"type": "string", "maxLength": fleet.MaxManifestBytes}},
			"application/json": obj{"schema": ref("SubmitRequest")},
		}},
		ok: map[string]obj{
			"201": withHeader(respond("Created, with warnings when no enrolled factory could run it.", ref("Submitted")), "Location", "The job's URL."),
			"200": respond("The job this idempotencyKey already made.", ref("Submitted")),
		},
		errors: []string{"400", "413", "422"}},
	{method: "GET", pattern: "/api/fleet/jobs", access: operatorOnly, needsProduct: true, handle: (*server).listJobs, summary: "List a product's jobs",
		description: "Newest first (by creation), one page at a time: at most limit jobs, and at most 4 MiB of them (a page of jobs with large manifests ends early, with a cursor). Needs a product: x-product-id, or a token scoped to one.",
		params: []param{
			queryParam("stage", "Only jobs in this stage.", ref("Stage")),
			queryParam("limit", "Page size.", obj{"type": "integer", "minimum": 1, "maximum": maxJobPage, "default": defaultJobPage}),
			queryParam("cursor", "The cursor of the previous page.", obj{"type": "string", "maxLength": maxCursorLen}),
		},
		ok:     map[string]obj{"200": respond("One page.", ref("JobPage"))},
		errors: []string{"400"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}", access: anyPrincipal, handle: (*server).getJob, summary: "Read a job",
		description: "A factory token reads any job of its products, held or not (its branch GC and recovery ask about jobs it no longer holds); " +
			"the job's runs, events, explanation, DAG and artifacts only while it holds it.",
		params: []param{jobID}, ok: map[string]obj{"200": respond("The job.", ref("Job"))},
		errors: []string{"400", "404"}},
	{method: "PATCH", pattern: "/api/fleet/jobs/{id}", access: factoryOnly, handle: (*server).patchJob, summary: "Update a held job (fenced)",
		description: "The holder moves its job to building, review, testing or shipped and/or records a checkpoint. " +
			"A stale leaseEpoch or another factory gets 409 fenced and changes nothing.",
		params: []param{jobID, headerParam(api.HeaderPrefer, "return=minimal (RFC 7240) answers 204, with Preference-Applied: return=minimal, instead of the job.", obj{"type": "string"})},
		body:   jsonBody(ref("PatchRequest")),
		ok: map[string]obj{"200": respond("The job after the update.", ref("Job")),
			"204": withHeader(respond("Updated; the job is not sent back (Prefer: return=minimal).", nil),
				api.HeaderPreferenceApplied, "return=minimal")},
		errors: []string{"400", "404", "409", "413"}},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/actions/{action}", access: operatorOnly, handle: (*server).actOnJob, summary: "Operator action",
		description: "ship, requeue, reject or cancel, where the stage machine allows it (409 otherwise). A requeued job whose dependencies have not shipped is blocked until they do; a job whose dependencies can no longer ship fails with reason dependency_failed. " +
			"Cancel of a job that holds no lease is immediate (200). Cancel of a leased job answers 202 with cancelRequested set: the holder hears of it at once (control message) or at its next renewal, stops, checkpoints and releases with outcome cancelled; without that acknowledgement within the cancel grace the lease is revoked and the job cancelled anyway (events cancel_acknowledged or cancel_forced).",
		params: []param{jobID, {name: "action", in: inPath, required: true,
			schema: operatorActions()}},
		body: optionalJSONBody(ref("ActionRequest")),
		ok: map[string]obj{"200": respond("The job after the action.", ref("Job")),
			"202": respond("Cancel of a leased job: requested of its holder; the job as it is now.", ref("Job"))},
		errors: []string{"400", "404", "409", "413"}},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/lease/renew", access: factoryOnly, handle: (*server).renewLease, summary: "Renew a lease",
		params: []param{jobID}, body: jsonBody(ref("LeaseRequest")),
		ok:     map[string]obj{"200": respond("The new expiry.", ref("RenewResponse"))},
		errors: []string{"400", "404", "409", "413"}},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/lease/release", access: factoryOnly, handle: (*server).releaseLease, summary: "Release a lease",
		description: "Without an outcome the job goes back to the queue with its checkpoint. outcome cancelled acknowledges a cancel (the job ends cancelled); " +
			"outcome preempted acknowledges a preemption (queued again, no attempt spent). An outcome nobody asked for is 409; a job whose cancel is pending ends cancelled whatever the outcome.",
		params: []param{jobID}, body: jsonBody(ref("ReleaseRequest")),
		ok:     map[string]obj{"200": respond("The job after the release.", ref("Job"))},
		errors: []string{"400", "404", "409", "413"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/runs", access: operatorOrHolder, handle: (*server).jobRuns, summary: "A job's runs",
		description: "One run per lease, oldest first; the run in progress, if any, last. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
		params:      []param{jobID}, ok: map[string]obj{"200": respond("The runs.", listOf("Run"))},
		errors: []string{"400", "404"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/events", access: operatorOrHolder, long: longWithWait, handle: (*server).jobEvents, summary: "A job's events",
		description: "Oldest first. Page with after=<seq of the last event seen>. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
		params: []param{jobID,
			queryParam("after", "Only events with a greater seq.", obj{"type": "integer", "minimum": 0, "default": 0}),
			queryParam("limit", "At most this many.", obj{"type": "integer", "minimum": 1, "maximum": maxEventPage, "default": maxEventPage}),
			queryParam("wait", "Long poll: when no event follows after, wait up to this long (a duration such as 30s, at most 60s) "+
				"for one before answering. The equivalent of the stream for clients behind a proxy that buffers responses. "+
				"A wait above zero counts against the stream caps (429 throttled past them).",
				obj{"type": "string", "default": "0s"}),
		},
		ok:     map[string]obj{"200": respond("The events.", listOf("Event"))},
		errors: []string{"400", "404"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/events/stream", access: operatorOrHolder, long: alwaysLong, handle: (*server).jobEventStream, summary: "A job's events, live (SSE)",
		description: "text/event-stream. Each event is `id: <seq>`, `event: <type>`, `data: <Event JSON>`. " +
			"Resume with the Last-Event-ID header (what EventSource sends) or after=<seq>: the events after it are replayed first, then live ones follow. " +
			"A `: keep-alive` comment every 15 s keeps it open. The stream ends after the event that takes the job to a terminal stage " +
			"(shipped, failed, dead_letter, cancelled), and after 200 s in any case, under the Azure front end's 230 s (reconnect with the last id: nothing is missed). " +
			"Behind a front door that buffers (the Lambda shape, or the Functions host forwarding instead of proxying: User-Agent Azure-Functions-Host/…) it ends as soon as it has sent events, at most 500 at a time, or after 60 s with nothing: a long poll. " +
			"A factory token may stream only a job it holds now (403 forbidden otherwise). A bad Last-Event-ID or after is 400 naming it." +
			" Counts against the stream caps (FLEET_MAX_STREAMS_PER_PRINCIPAL per token, FLEET_MAX_STREAMS per process): past either, 429 throttled with Retry-After, before anything is read.",
		params: []param{jobID,
			queryParam("after", "Resume after this seq (Last-Event-ID wins when both are sent).", obj{"type": "integer", "minimum": 0}),
			headerParam(headerLastEventID, "The seq to resume after.", obj{"type": "string"}),
		},
		ok:     map[string]obj{"200": eventStream("The job's events, as server-sent events.")},
		errors: []string{"400", "404"}},
	{method: "GET", pattern: "/api/fleet/events", access: operatorOnly, long: longWithWait, needsProduct: true, handle: (*server).productEvents, summary: "A product's changes, long poll",
		description: "The product stream (GET /fleet/events/stream) for a client that cannot stream: {items: [{id, type, data}], position}. " +
			"Pass the position back as after to get what changed since (a change may come twice); without after it starts from now. " +
			"With wait, an answer that would be empty waits up to that long for a change. Needs a product: x-product-id, or a token scoped to one. " +
			"A position far back is answered a page at a time: once an answer holds 500 changes (completing the feed page it is in) or has read 50 feed pages, it is given at once with the position reached, and the client pages on.",
		params: []param{
			queryParam("after", "The position of the previous answer (or an id of the stream).", obj{"type": "string", "maxLength": maxResumeID}),
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
	{method: "GET", pattern: "/api/fleet/events/stream", access: operatorOnly, long: alwaysLong, needsProduct: true, handle: (*server).productEventStream, summary: "A product's changes, live (SSE)",
		description: "text/event-stream of every change of the product's jobs (each job event: `event: <type>`, data the Event) " +
			"and of its factories (`event: factory`, data the Factory, shown as GET /fleet/factories shows it to the token). " +
			"Needs a product: x-product-id, or a token scoped to one. " +
			"Ids are opaque positions in the store's change feeds; a block with only an id (no data) moves the client's position without an event. " +
			"Resume with Last-Event-ID or after=<id>: what changed since is replayed first, a page at a time as GET /fleet/events pages it (past a page, the stream ends and the client reconnects with its last id). A resumed client misses nothing and may see a change twice " +
			"(de-duplicate job events by data.id). Keep-alive comments every 15 s; the stream ends after 200 s (reconnect with the last id). " +
			"Behind a front door that buffers it ends as soon as it has sent changes, or after 60 s with nothing. " +
			"A bad Last-Event-ID or after is 400 naming it." +
			" Counts against the stream caps (FLEET_MAX_STREAMS_PER_PRINCIPAL per token, FLEET_MAX_STREAMS per process): past either, 429 throttled with Retry-After, before anything is read.",
		params: []param{
			queryParam("after", "Resume after this id (Last-Event-ID wins when both are sent).", obj{"type": "string", "maxLength": maxResumeID}),
			headerParam(headerLastEventID, "The id to resume after.", obj{"type": "string", "maxLength": maxResumeID}),
		},
		ok:     map[string]obj{"200": eventStream("The product's changes, as server-sent events.")},
		errors: []string{"400"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/explain", access: operatorOrHolder, handle: (*server).explainJob, summary: "Why a job went where it went",
		description: "Per factory: whether it passed the hard filter (and why not) and each score term with the total. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
		params:      []param{jobID}, ok: map[string]obj{"200": respond("The explanation.", ref("Explanation"))},
		errors: []string{"400", "404"}},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/children", access: anyPrincipal, handle: (*server).postChildren, summary: "Give a job children",
		description: fmt.Sprintf("The children are created in the job's product with parentId set, each idempotent by its idempotencyKey "+
			"(a child without one is keyed by its parent and manifest: the same manifest again is the same child). A child's deps may name "+
			"a sibling of the same request by its idempotencyKey. The parent then waits in blocked: an operator posts to a queued or "+
			"blocked job; the holder factory posts with its leaseEpoch (fenced) and gives its seat back. When every child has shipped the "+
			"parent is queued for its own step, or shipped at once when kind: composite; a child ending unshipped fails it with "+
			"dependency_failed. Limits: %d children per request, depth %d below the root, %d jobs per tree (400 naming children). "+
			"201 when a child was created; 200 with the same jobs when every one existed already.",
			fleet.MaxChildrenPerRequest, fleet.MaxTreeDepth, fleet.MaxTreeJobs),
		params: []param{jobID}, body: jsonBody(ref("ChildrenRequest")),
		ok: map[string]obj{"201": respond("The children, in the request's order.", listOf("Job")),
			"200": respond("The same children as before; nothing written.", listOf("Job"))},
		errors: []string{"400", "404", "409", "413", "422"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/dag", access: operatorOrHolder, handle: (*server).jobDAG, summary: "The tree of children a job belongs to",
		description: "Its root, every job below it and the jobs outside it one of them depends on, with child and dep edges and a count per stage. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
		params:      []param{jobID}, ok: map[string]obj{"200": respond("The DAG.", ref("DAG"))},
		errors: []string{"400", "404"}},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/review/request", access: anyPrincipal, handle: (*server).requestReview, summary: "Request a review",
		description: "Sets the review gate's head (a new head clears the votes) and, from an operator, its reviewers and quorum. " +
			"The holder (fenced by leaseEpoch) delivers its building job for review and may send only leaseEpoch and head: " +
			"reviewers or quorum from it are 403 forbidden naming the field (the party under review cannot change its own gate). " +
			"An operator changes the gate of a job in review, which passes to testing at once when the votes already make the quorum; " +
			"it may add reviewers or raise the quorum, never drop a reviewer the manifest listed or go below its quorum " +
			"(403 forbidden, field reviewers or quorum; the manifest's gate is kept as review.minimum). " +
			"A quorum above the number of reviewers is 400.",
		params: []param{jobID}, body: jsonBody(ref("ReviewRequest")),
		ok:     map[string]obj{"200": respond("The job.", ref("Job"))},
		errors: []string{"400", "403", "404", "409", "413"}},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/review", access: operatorOnly, handle: (*server).vote, summary: "Vote on a job in review",
		description: "The voter is the operator token's name (name:token in FLEET_OPERATOR_TOKEN); when the gate lists reviewers it must be " +
			"one of them (403 otherwise). A vote on another head than review.head is 409 conflict. A reviewer's later vote on the same head " +
			"replaces their earlier one. Approvals of quorum distinct reviewers move the job to testing; a rejection moves it to queued " +
			"with the comment as review.feedback (no attempt spent), or to failed with onReject: fail.",
		params: []param{jobID}, body: jsonBody(ref("VoteRequest")),
		ok:     map[string]obj{"200": respond("The job after the vote.", ref("Job"))},
		errors: []string{"400", "404", "409", "413"}},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/artifacts", access: anyPrincipal, handle: (*server).uploadArtifact, summary: "Upload an artifact (holder fenced, or operator)",
		description: "The body is the artifact's bytes, with Content-Type saying what they are (default application/octet-stream) " +
			"and Content-Length declared (a chunked body is refused: the Functions host drops it). The holder factory sends " +
			"leaseEpoch and a stale one is 409 fenced with nothing stored; an operator sends none and the artifact belongs to no run. " +
			"Bytes are stored once per product whatever the number of identical uploads; over the size limit " +
			"(FLEET_ARTIFACT_MAX_BYTES) is 413 with nothing stored.",
		params: []param{jobID,
			{name: "name", in: inQuery, required: true, schema: name(""), desc: "The artifact's name, such as output.log."},
			queryParam("kind", "What it holds; default other.", enumOf("", fleet.ArtifactKinds())),
			queryParam("leaseEpoch", "The holder's epoch; required of a factory, refused from an operator.", obj{"type": "integer", "minimum": 0}),
		},
		body:   obj{"required": true, "content": obj{"*/*": obj{"schema": obj{"type": "string", "format": "binary"}}}},
		ok:     map[string]obj{"201": withHeader(respond("Stored.", ref("Artifact")), "Location", "The artifact's URL.")},
		errors: []string{"400", "404", "409", "413"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/artifacts", access: operatorOrHolder, handle: (*server).listArtifacts, summary: "A job's artifacts",
		description: "Oldest first. A factory token reads this only for a job it holds now (403 forbidden otherwise).",
		params:      []param{jobID}, ok: map[string]obj{"200": respond("The artifacts.", listOf("Artifact"))},
		errors: []string{"400", "404"}},
	{method: "GET", pattern: "/api/fleet/artifacts/{id}", access: operatorOrHolder, handle: (*server).getArtifact, summary: "Read an artifact's metadata",
		description: "A factory token reads this only for an artifact of a job it holds now (403 forbidden otherwise).",
		params:      []param{pathParam("id", "The artifact id.")}, ok: map[string]obj{"200": respond("The artifact.", ref("Artifact"))},
		errors: []string{"400", "404"}},
	{method: "GET", pattern: "/api/fleet/artifacts/{id}/content", access: operatorOrHolder, handle: (*server).artifactContent, summary: "Download an artifact's bytes",
		description: "With the artifact's Content-Type, its Content-Length and ETag \"<sha256>\"; If-None-Match with that tag answers 304. " +
			"Served as an attachment, sandboxed, never sniffed. A factory token reads this only for an artifact of a job it holds now (403 forbidden otherwise).",
		params: []param{pathParam("id", "The artifact id."),
			headerParam("If-None-Match", "The ETag held.", obj{"type": "string"})},
		ok: map[string]obj{
			"200": {"description": "The bytes.", "content": obj{"*/*": obj{"schema": obj{"type": "string", "format": "binary"}}},
				"headers": obj{"ETag": obj{"schema": obj{"type": "string"}, "description": "The SHA-256 of the bytes, quoted."}}},
			"304": respond("Not modified: the client's copy is current.", nil),
		},
		errors: []string{"400", "404"}},
	{method: "DELETE", pattern: "/api/fleet/artifacts/{id}", access: operatorOnly, handle: (*server).deleteArtifact, summary: "Delete an artifact",
		description: "Removes the pointer; the bytes go when no other artifact of the product has the same digest.",
		params:      []param{pathParam("id", "The artifact id.")},
		ok:          map[string]obj{"204": respond("Deleted.", nil)},
		errors:      []string{"400", "404"}},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/log", access: factoryOnly, handle: (*server).appendLog, summary: "Append to a run's live output (holder, fenced)",
		description: "The body is the next bytes of the engine's output, whatever their Content-Type, with Content-Length declared, at most 1 MiB; " +
			"offset is where they start in the run's log. offset equal to the log's size appends; a chunk already stored (offset + length <= size) " +
			"is accepted again and changes nothing, so a retry is safe; one overlapping the end appends only its new part; offset past the size is " +
			"409 conflict naming offset, with " + api.HeaderLogSize + " saying where to resend from. A stale leaseEpoch or another factory is 409 fenced " +
			"with nothing stored. A run keeps the last FLEET_MAX_LOG_BYTES (default 32 MiB) of its log: offsets go on counting, the oldest bytes are dropped.",
		params: []param{jobID,
			{name: "leaseEpoch", in: inQuery, required: true, schema: obj{"type": "integer", "minimum": 0}, desc: "The holder's epoch."},
			{name: "offset", in: inQuery, required: true, schema: obj{"type": "integer", "minimum": 0}, desc: "Where the chunk starts in the run's log."},
		},
		body: obj{"required": true, "content": obj{"*/*": obj{"schema": obj{"type": "string", "format": "binary"}}}},
		ok: map[string]obj{"200": {"description": "Stored (or already stored).", "content": jsonContent(ref("LogAppended")),
			"headers": obj{api.HeaderLogSize: obj{"schema": obj{"type": "integer"}, "description": "The log's size after the chunk."}}}},
		errors: []string{"400", "404", "409", "413"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/log", access: operatorOrHolder, handle: (*server).getLog, summary: "A run's live output, as text",
		description: "The log of the run of epoch, by default the run holding the lease now, else the newest run, from offset to its end as it stands. " +
			"text/plain, never interpreted (nosniff); it is what the engine wrote, ANSI escapes included. " + api.HeaderLogComplete + ": true once the run has ended. " +
			"Read on from " + api.HeaderLogSize + ". An offset before " + api.HeaderLogStart + " (bytes the cap dropped) answers from there, starting with a line saying how many were dropped. " +
			"A factory token reads this only for a job it holds now (403 forbidden otherwise).",
		params: []param{jobID,
			queryParam("epoch", "The run's lease epoch; by default the run holding the lease, else the newest.", obj{"type": "integer", "minimum": 1}),
			queryParam("offset", "Where to start; at most the log's size.", obj{"type": "integer", "minimum": 0, "default": 0}),
		},
		ok: map[string]obj{"200": {"description": "The log's text.", "content": obj{"text/plain": obj{"schema": obj{"type": "string"}}},
			"headers": obj{
				api.HeaderLogSize:     obj{"schema": obj{"type": "integer"}, "description": "The offset after the last byte answered: read on from here."},
				api.HeaderLogStart:    obj{"schema": obj{"type": "integer"}, "description": "The first offset still kept."},
				api.HeaderLogComplete: obj{"schema": obj{"type": "string", "enum": []string{"true", "false"}}, "description": "true once the run has ended."},
				api.HeaderLogEpoch:    obj{"schema": obj{"type": "integer"}, "description": "The lease epoch of the run answered."},
			}}},
		errors: []string{"400", "404"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/log/stream", access: operatorOrHolder, long: alwaysLong, handle: (*server).logStream, summary: "A run's live output, live (SSE)",
		description: "text/event-stream of the run's log (the run of epoch, by default as GET …/log picks it): one event per chunk, `id: <the log offset after the chunk>`, " +
			"`data: <the chunk's text as a JSON string>` (a UTF-8 character split between chunks goes whole into the later one; invalid UTF-8 reads as U+FFFD). " +
			"Resume with Last-Event-ID (what EventSource sends) or after=: the bytes from that offset follow, none missed, none twice. " +
			"Bytes the cap dropped come as one `event: " + api.LogEventDropped + "` whose data says how many, its id where the kept bytes start. " +
			"When the run has ended and every byte is sent, `event: " + api.LogEventEnd + "` (its id the log's size) and the stream ends: do not reconnect. " +
			"New bytes reach the stream within about 250 ms of their append. Keep-alive comments every 15 s; the stream ends after 200 s in any case " +
			"(reconnect with the last id), and at once when the server shuts down. Behind a front door that buffers it ends as soon as it has sent something, or after 60 s: a long poll. " +
			"A factory token may stream only a job it holds now (403 forbidden otherwise). A bad or too large Last-Event-ID or after is 400 naming it." +
			" Counts against the stream caps (FLEET_MAX_STREAMS_PER_PRINCIPAL per token, FLEET_MAX_STREAMS per process): past either, 429 throttled with Retry-After, before anything is read.",
		params: []param{jobID,
			queryParam("epoch", "The run's lease epoch; by default the run holding the lease, else the newest.", obj{"type": "integer", "minimum": 1}),
			queryParam("after", "Resume from this offset (Last-Event-ID wins when both are sent).", obj{"type": "integer", "minimum": 0}),
			headerParam(headerLastEventID, "The offset to resume from: the id of the last event received.", obj{"type": "string"}),
		},
		ok:     map[string]obj{"200": eventStream("The run's log, as server-sent events.")},
		errors: []string{"400", "404"}},
	{method: "POST", pattern: "/api/fleet/jobs/{id}/usage", access: factoryOnly, handle: (*server).reportUsage, summary: "Report a run's usage (holder, fenced)",
		description: "The run's usage so far, cumulative: each figure merges by maximum, so a retried or late report changes nothing " +
			"and a lower figure never lowers what was recorded. A report that changes the figures appends a usage event; " +
			"one that passes the run's budget reservation grows the reservation. The final PATCH and /fail may carry the same usage object.",
		params: []param{jobID}, body: jsonBody(ref("UsageRequest")),
		ok:     map[string]obj{"200": respond("The job, its runReport updated.", ref("Job"))},
		errors: []string{"400", "404", "409", "413"}},

	{method: "POST", pattern: "/api/fleet/claim", access: factoryOnly, handle: (*server).claim, summary: "Claim the best job (poll transport)",
		description: "Draws from every product the factory's token is scoped to. The body may be empty or {}. " +
			"A requestId (or an Idempotency-Key header) makes it safe to retry: the same id again, from the same factory, " +
			"answers the lease the first try took while the factory still holds it, instead of taking another job.",
		params: []param{headerParam(headerIdempotencyKey, "", name("The claim's request id, as requestId."))},
		body: optionalJSONBody(object(nil, obj{
			"requestId": name("The client's id of this claim; the same id on a retry."),
		})),
		ok: map[string]obj{
			"200": respond("A job and its lease.", ref("Claimed")),
			"204": respond("Nothing to claim.", nil),
		},
		errors: []string{"400", "404", "413"}},
	{method: "POST", pattern: "/api/fleet/accept", access: factoryOnly, handle: (*server).accept, summary: "Accept a dispatched job (push transport)",
		description: "The factory the dispatch message targeted takes the job if dispatchEpoch is still current; 409 means someone else has it.",
		body:        jsonBody(ref("AcceptRequest")),
		ok:          map[string]obj{"200": respond("The job and its lease.", ref("Claimed"))},
		errors:      []string{"400", "404", "409", "413"}},
	{method: "POST", pattern: "/api/fleet/fail", access: factoryOnly, handle: (*server).fail, summary: "Report a failure (lease released now)",
		description: "retryable: back to the queue after a backoff, or dead_letter when attempts run out; otherwise failed.",
		body:        jsonBody(ref("FailRequest")),
		ok:          map[string]obj{"200": respond("The job after the failure.", ref("Job"))},
		errors:      []string{"400", "404", "409", "413"}},

	{method: "POST", pattern: "/api/fleet/factories/enroll", access: operatorOnly, handle: (*server).enroll, summary: "Enrol a factory",
		description: "Issues the factory's token, shown only in this response. A token scoped to products may enrol only factories serving those products.",
		body:        jsonBody(ref("EnrollRequest")),
		ok:          map[string]obj{"201": respond("Enrolled.", ref("EnrollResponse"))},
		errors:      []string{"400", "409", "413"}},
	{method: "POST", pattern: "/api/fleet/factories/heartbeat", access: factoryOnly, handle: (*server).heartbeat, summary: "Report a factory's state",
		description: "capabilities and repos replace the stored lists; capabilities must stay within the token's scope.",
		body:        jsonBody(ref("HeartbeatRequest")),
		ok:          map[string]obj{"200": respond("The factory.", ref("Factory"))},
		errors:      []string{"400", "404", "409", "413"}},
	{method: "GET", pattern: "/api/fleet/factories", access: operatorOnly, handle: (*server).listFactories, summary: "List factories",
		description: "Those serving x-product-id, or every factory serving a product of the token's scope. To a product-scoped token " +
			"a factory shared with other products shows only the token's products and the repos they own (capabilities, load and health stay).",
		ok: map[string]obj{"200": respond("The factories, by id.", listOf("Factory"))}},
	{method: "DELETE", pattern: "/api/fleet/factories/{id}", access: operatorOnly, handle: (*server).deregister, summary: "Deregister a factory",
		description: "Revokes its token. Jobs it held are reaped when their leases expire.",
		params:      []param{pathParam("id", "The factory id.")},
		ok:          map[string]obj{"204": respond("Deregistered.", nil)},
		errors:      []string{"400", "404"}},
	{method: "POST", pattern: "/api/fleet/factories/{id}/drain", access: operatorOnly, handle: (*server).drain, summary: "Drain a factory",
		description: "An extension of the contract: the factory gets no new assignments (dispatch, claim, accept; /explain names it \"factory is draining\") and keeps, renews and finishes the jobs it holds. Jobs already dispatched to it are dispatched elsewhere. Idempotent.",
		params:      []param{pathParam("id", "The factory id.")},
		ok:          map[string]obj{"200": respond("The factory, draining.", ref("Factory"))},
		errors:      []string{"400", "404", "409"}},
	{method: "POST", pattern: "/api/fleet/factories/{id}/undrain", access: operatorOnly, handle: (*server).undrain, summary: "Put a drained factory back into service",
		description: "Clears draining; waiting jobs are retried at once. Idempotent.",
		params:      []param{pathParam("id", "The factory id.")},
		ok:          map[string]obj{"200": respond("The factory.", ref("Factory"))},
		errors:      []string{"400", "404", "409"}},
	{method: "POST", pattern: "/api/fleet/factories/{id}/token/rotate", access: operatorOrSelf, handle: (*server).rotateToken, summary: "Rotate a factory's token",
		description: "Issues a new token and revokes the old one. A factory may rotate its own.",
		params:      []param{pathParam("id", "The factory id.")},
		ok:          map[string]obj{"200": respond("The new token, shown once.", ref("TokenResponse"))},
		errors:      []string{"400", "404", "409"}},
	{method: "POST", pattern: "/api/fleet/factories/{id}/token/revoke", access: operatorOrSelf, handle: (*server).revokeToken, summary: "Revoke a factory's token",
		description: "The factory stays enrolled; rotate gives it a new token.",
		params:      []param{pathParam("id", "The factory id.")},
		ok:          map[string]obj{"204": respond("Revoked.", nil)},
		errors:      []string{"400", "404", "409"}},

	{method: "PUT", pattern: "/api/fleet/products/{productId}", access: operatorOnly, handle: (*server).putProduct, summary: "Declare a product and its repos",
		description: "repos replaces the list. A repo has one owning product: claiming one another product owns is 409 conflict naming the owner, unless an unscoped operator sets moveRepos. A job whose repo its product does not own is rejected with 422 repo_not_owned. maxRunning caps the product's jobs holding a lease at once (0 or absent: uncapped).",
		params:      []param{pathParam("productId", "The product id.")},
		body:        jsonBody(ref("ProductRequest")),
		ok:          map[string]obj{"200": respond("The product.", ref("Product"))},
		errors:      []string{"400", "409", "413"}},
	{method: "GET", pattern: "/api/fleet/products/{productId}", access: operatorOnly, handle: (*server).getProduct, summary: "Read a product",
		params: []param{pathParam("productId", "The product id.")},
		ok:     map[string]obj{"200": respond("The product.", ref("Product"))},
		errors: []string{"400", "404"}},
	{method: "GET", pattern: "/api/fleet/repos", access: operatorOnly, handle: (*server).repos, summary: "Repos known to the fleet",
		description: "Each with the products owning it and the factories holding it; limited to x-product-id or the token's scope.",
		ok:          map[string]obj{"200": respond("The repos, by name.", listOf("RepoInfo"))}},

	{method: "POST", pattern: "/api/fleet/forge/github", access: public, handle: (*server).githubWebhook, summary: "A GitHub webhook delivery",
		description: "No bearer: X-Hub-Signature-256 must be the HMAC-SHA256 of the body with the webhook secret (FLEET_GITHUB_WEBHOOK_SECRET_FILE), else 401 and nothing changes. " +
			"X-GitHub-Event picks the payload's shape; every fact comes from the signed body. Reviews count only by the repository's owner, members and collaborators (author_association). " +
			"pull_request_review approved: the mapped reviewer's vote on the current head; changes_requested, or a check_run / check_suite completed failing on the head: the delivered job goes back to the queue as its next iteration with the feedback (no attempt spent; " +
			"past the product's maxIterations it stays, with event iteration_cap); check_suite completed success, or status success, on the head: with autoMerge, merged once the head is green; " +
			"pull_request closed: cancelled, merged: shipped. " +
			"A delivery applied before (its X-GitHub-Delivery or its body) changes nothing. Events the fleet does not act on: 204. Payloads over GitHub's 25 MB: 413. " +
			"A delivery without a signature of the right shape is 401 before its body is read; the deliveries being read hold at most 64 MiB at once (past it: 429 with Retry-After), each read within 30 s.",
		params: []param{
			{name: "X-GitHub-Event", in: inHeader, required: true, schema: str(""), desc: "The event: pull_request_review, check_run, check_suite, status, pull_request (others: 204)."},
			{name: "X-GitHub-Delivery", in: inHeader, schema: describe(obj{"type": "string", "maxLength": maxDeliveryID}, ""), desc: "The delivery's GUID (a redelivery keeps it)."},
			{name: "X-Hub-Signature-256", in: inHeader, required: true, schema: str(""), desc: "sha256=<hex HMAC-SHA256 of the body>."},
		},
		body: jsonBody(obj{"type": "object", "description": "The event's payload, as @octokit/openapi-webhooks describes it."}),
		ok: map[string]obj{
			"200": respond("What the delivery did.", ref("ForgeDelivery")),
			"204": {"description": "An event or action the fleet does not act on."},
		},
		// Public, so none of the authenticated routes' statuses is implied:
		// 401 a signature that does not verify, 429 the bodies being read
		// fill the route's budget, 503 no secret configured.
		errors: []string{"400", "401", "413", "429", "500", "503"}},
	{method: "POST", pattern: "/api/fleet/tracker/ingest", access: operatorOnly, needsProduct: true, handle: (*server).ingest, summary: "Ingest a tracker item as a job",
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
	{method: "POST", pattern: "/api/fleet/tracker/echo", access: operatorOnly, handle: (*server).resendEcho, summary: "Re-send a tracked job's events",
		description: "Starts the job's delivery over from seq 1 (every event is sent again, in order, backoff cleared) and records an echo_resend event, " +
			"whose write wakes the echo function. Answers at once with the delivery state; the sending happens in the echo function. 409 for a job not ingested from a tracker.",
		body:   jsonBody(ref("ResendRequest")),
		ok:     map[string]obj{"202": respond("The delivery state, reset.", ref("EchoState"))},
		errors: []string{"400", "404", "409"}},
	{method: "GET", pattern: "/api/fleet/jobs/{id}/echo", access: operatorOnly, handle: (*server).jobEcho, summary: "A tracked job's echo delivery state",
		description: "How far delivery of the job's events to its product's tracker webhook got: deliveredSeq (every seq up to it acknowledged, in order), " +
			"pendingSeq (the next to send; null when up to date), lastError and nextAttemptAt (the backoff's next try; null when none). 409 for a job not ingested from a tracker.",
		params: []param{jobID},
		ok:     map[string]obj{"200": respond("The delivery state.", ref("EchoState"))},
		errors: []string{"400", "404", "409"}},

	{method: "PUT", pattern: "/api/fleet/profiles/{name}", access: operatorOnly, needsProduct: true, handle: (*server).putProfile, summary: "Put a new version of a persona profile",
		description: "The profile is Markdown with YAML front matter (capabilities, engine, budget; name, if given, must match the path) " +
			"and the persona's instructions as the body, sent raw (text/markdown) or as " + `{"profile": "..."}` + ". " +
			"Every PUT creates the next immutable version, which becomes the latest; earlier versions never change. " +
			"A job submitted with persona: <name> snapshots the latest version (profile: {name, version, capabilities, body}), " +
			"gets its capabilities merged into its own and its engine and budget where the manifest is silent. Needs a product.",
		params: []param{pathParam("name", "The profile's name.")},
		body: obj{"required": true, "content": obj{
			"text/markdown":    obj{"schema": obj{"type": "string"}},
			"application/json": obj{"schema": ref("ProfileRequest")},
		}},
		ok:     map[string]obj{"201": withHeader(respond("The new version.", ref("Profile")), "Location", "The version's URL.")},
		errors: []string{"400", "409", "413"}},
	{method: "GET", pattern: "/api/fleet/profiles", access: operatorOnly, needsProduct: true, handle: (*server).listProfiles, summary: "List a product's profiles",
		description: "The latest version of each, by name, without instructions. Needs a product.",
		ok:          map[string]obj{"200": respond("The profiles.", listOf("ProfileSummary"))},
		errors:      []string{"400"}},
	{method: "GET", pattern: "/api/fleet/profiles/{name}", access: operatorOnly, needsProduct: true, handle: (*server).getProfile, summary: "Read a profile",
		description: "The latest version, or the one ?version= names. Needs a product.",
		params: []param{pathParam("name", "The profile's name."),
			queryParam("version", "A version number; the latest without it.", obj{"type": "integer", "minimum": 1})},
		ok:     map[string]obj{"200": respond("The profile version.", ref("Profile"))},
		errors: []string{"400", "404"}},
	{method: "GET", pattern: "/api/fleet/profiles/{name}/versions", access: operatorOnly, needsProduct: true, handle: (*server).profileVersions, summary: "A profile's versions",
		description: "Every version, oldest first, without instructions. Needs a product.",
		params:      []param{pathParam("name", "The profile's name.")},
		ok:          map[string]obj{"200": respond("The versions.", listOf("ProfileSummary"))},
		errors:      []string{"400", "404"}},

	{method: "PUT", pattern: "/api/fleet/budgets/{productId}", access: operatorOnly, handle: (*server).putBudget, summary: "Set a product's budget",
		description: "ceilingUsd is required; period (month or total, default month), alertAt (default 0.8), autoPause (default true) " +
			"and defaultJobUsd (the estimate of a job without budget.usd, default 0) take defaults when absent. Spend, reservations " +
			"and a pause are kept across PUTs. Jobs are only assigned while the product is not paused and spent + reserved + estimate <= ceiling.",
		params: []param{pathParam("productId", "The product id.")},
		body:   jsonBody(ref("BudgetRequest")),
		ok:     map[string]obj{"200": respond("The budget.", ref("Budget"))},
		errors: []string{"400", "404", "409", "413"}},
	{method: "GET", pattern: "/api/fleet/budgets/{productId}", access: operatorOnly, handle: (*server).getBudget, summary: "Read a product's budget",
		params: []param{pathParam("productId", "The product id.")},
		ok:     map[string]obj{"200": respond("The budget.", ref("Budget"))},
		errors: []string{"400", "404"}},
	{method: "GET", pattern: "/api/fleet/budgets/{productId}/burndown", access: operatorOnly, handle: (*server).burndown, summary: "A budget's burndown",
		description: "The period's cumulative spend at each settled run, and the linear forecast of when it reaches the ceiling (null when it will not this period).",
		params:      []param{pathParam("productId", "The product id.")},
		ok:          map[string]obj{"200": respond("The burndown.", ref("Burndown"))},
		errors:      []string{"400", "404"}},
	{method: "POST", pattern: "/api/fleet/budgets/{productId}/pause", access: operatorOnly, handle: (*server).pauseBudget, summary: "Pause a product",
		description: "No job of the product is assigned until it is resumed; running jobs finish.",
		params:      []param{pathParam("productId", "The product id.")},
		body:        optionalJSONBody(ref("PauseRequest")),
		ok:          map[string]obj{"200": respond("The budget.", ref("Budget"))},
		errors:      []string{"400", "404", "409", "413"}},
	{method: "POST", pattern: "/api/fleet/budgets/{productId}/resume", access: operatorOnly, handle: (*server).resumeBudget, summary: "Resume a product",
		description: "Lifts the pause and lets held jobs flow at once (admission still applies).",
		params:      []param{pathParam("productId", "The product id.")},
		ok:          map[string]obj{"200": respond("The budget.", ref("Budget"))},
		errors:      []string{"400", "404", "409"}},

	{method: "GET", pattern: "/api/fleet/metrics", access: operatorOnly, handle: (*server).metrics, summary: "The fleet at a glance",
		description: "For x-product-id, or the whole fleet for an unscoped token. A token scoped to several products must name one.",
		ok:          map[string]obj{"200": respond("The metrics.", ref("Metrics"))},
		errors:      []string{"400"}},
	{method: "GET", pattern: "/api/fleet/queue-state", access: anyPrincipal, needsProduct: true, handle: (*server).queueState, summary: "A product's queue version",
		description: "Bumped whenever a job enters queued: a polling factory claims only when it moved. Needs a product.",
		ok:          map[string]obj{"200": respond("The queue state.", ref("QueueState"))},
		errors:      []string{"400"}},
}
