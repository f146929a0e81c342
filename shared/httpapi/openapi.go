package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/gigafactory/fleet/shared/coord/dag"
	"github.com/gigafactory/fleet/shared/fleet"
)

// The OpenAPI 3.1 document: its operations come from the route table
// (routes.go), the schemas they name are written here.

type obj = map[string]any

func (s *server) openAPI(w http.ResponseWriter, _ *http.Request, _ *principal) error {
	body, err := s.openAPIJSON()
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

// openAPIJSON is built once: the document is static. The handler reaches
// it through the server (New sets it): the route table names the handler
// and the document is built from the route table, so a reference from the
// handler would be an initialization cycle.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	return json.MarshalIndent(openAPIDocument(), "", "  ")
})

func openAPIDocument() obj {
	paths := obj{}
	for _, rt := range routes {
		path := strings.TrimPrefix(rt.pattern, apiPrefix)
		item, _ := paths[path].(obj)
		if item == nil {
			item = obj{}
			paths[path] = item
		}
		item[strings.ToLower(rt.method)] = rt.operation(path)
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

// operation is the route's OpenAPI operation; path is its pattern less
// the /api prefix (the document's server URL).
func (rt route) operation(path string) obj {
	o := obj{
		"operationId":    operationID(rt.method, path),
		"summary":        rt.summary,
		"x-fleet-access": rt.access.String(),
	}
	if rt.description != "" {
		o["description"] = rt.description
	}
	params := make([]obj, 0, len(rt.params)+1)
	for _, p := range rt.params {
		params = append(params, p.render())
	}
	if rt.access == public {
		o["security"] = []obj{}
	} else {
		params = append(params, obj{"$ref": "#/components/parameters/ProductId"})
	}
	if len(params) > 0 {
		o["parameters"] = params
	}
	if rt.body != nil {
		o["requestBody"] = rt.body
	}
	resp := obj{}
	for status, r := range rt.ok {
		resp[status] = r
	}
	statuses := rt.errors
	if rt.access != public {
		statuses = append(slices.Clip(statuses), "401", "403", "429", "503", "500")
	}
	for _, st := range statuses {
		resp[st] = obj{"$ref": "#/components/responses/" + errorResponseName[st]}
	}
	o["responses"] = resp
	return o
}

func (p param) render() obj {
	o := obj{"name": p.name, "in": string(p.in), "required": p.required, "schema": p.schema}
	if p.desc != "" {
		o["description"] = p.desc
	}
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
		"from": ref("Stage"), "to": ref("Stage"), "actor": enumOf("", fleet.Actors()),
		"actorId": str(""), "message": str(""), "data": obj{"description": "Free-form JSON."}, "at": dateTime(""),
	}
}

// name is a plain name: a job, factory, product or repo id.
func name(desc string) obj {
	return describe(obj{"type": "string", "pattern": `^[A-Za-z0-9_][A-Za-z0-9._-]*$`, "maxLength": fleet.MaxNameLen}, desc)
}

// eventType is the schema of an event's type.
var eventType = enumOf("What the event records.", fleet.EventTypes)

// operatorActions is the enum of an operator's actions, in the order a
// console offers them.
func operatorActions() obj {
	names := make([]string, len(fleet.OperatorActions))
	for i, a := range fleet.OperatorActions {
		names[i] = a.Name
	}
	return enum("", names...)
}

// unroutableKind is the schema of a job's dispatch.unroutableKind.
var unroutableKind = enumOf("no_factory: nothing in the fleet can run the job (it needs a change); busy: factories could, but none can now; "+
	"budget: its product's budget holds it back (paused, or no room under the ceiling); seat_cap: its product runs maxRunning jobs already.",
	fleet.UnroutableKinds())

// holdSchema is fleet.Hold, why admission holds a queued job back;
// running and maxRunning are a seat_cap hold's.
func holdSchema(required []string, desc string, kinds ...fleet.HoldKind) obj {
	return object(required, obj{
		"kind": enumOf(desc, kinds), "message": str(""),
		"running": integer("seat_cap: seats taken."), "maxRunning": integer("seat_cap: the product's cap."),
	})
}

// usageSchema is fleet.Usage.
var usageSchema = object([]string{"usd", "inputTokens", "outputTokens"}, obj{
	"usd": number("Cumulative cost in USD."), "inputTokens": integer(""), "outputTokens": integer(""),
	"cacheReadTokens":  integer("Prompt-cache reads a structured engine reported."),
	"cacheWriteTokens": integer("Prompt-cache writes a structured engine reported."),
})

var forgeSchema = object([]string{"kind", "repos", "autoMerge", "mergeMethod", "maxIterations"}, obj{
	"kind":       enumOf("Default github.", fleet.ForgeKinds()),
	"repos":      describe(obj{"type": "object", "additionalProperties": str("owner/name")}, "Each repo the product owns that has pull requests, to its repository on the forge."),
	"baseBranch": str("What pull requests merge into; absent: the repository's default branch."),
	"autoMerge": boolean("Merge once the review quorum is met and every check run and commit status on the head is green, " +
		"the requiredChecks among them; with none required, once at least one is reported."),
	"mergeMethod":   enumOf("Default squash.", fleet.MergeMethods()),
	"maxIterations": describe(obj{"type": "integer", "minimum": 1, "maximum": fleet.MaxMaxIterations}, "Deliveries the forge's feedback may ask for; default 3."),
	"reviewers":     describe(obj{"type": "object", "additionalProperties": str("A reviewer name of the review gate.")}, "Forge login to reviewer name; a login not listed votes as itself."),
	"requiredChecks": describe(obj{"type": "array", "maxItems": fleet.MaxRequiredChecks,
		"items": obj{"type": "string", "minLength": 1, "maxLength": fleet.MaxCheckNameLen}},
		"Check run names or commit status contexts autoMerge waits for: each must be reported on the head and green. "+
			"Trimmed; a blank or repeated name is a 400 on forge.requiredChecks[i]."),
})

// engineFacts are fleet.EngineFacts' properties, flat in the run and in
// the holder's reports (API.md "Engines the factory understands").
func engineFacts(into obj) obj {
	into["engineSession"] = describe(obj{"type": "string", "maxLength": 128},
		"The engine's session (Claude session_id, Codex thread_id): a retry on the same factory resumes it.")
	into["turns"] = describe(obj{"type": "integer", "minimum": 0}, "Turns the engine reported.")
	into["model"] = describe(obj{"type": "string", "maxLength": 128}, "The model the engine reported.")
	into["lastActivityAt"] = dateTime("When the engine last printed anything.")
	into["exit"] = object([]string{"code", "reason"}, obj{
		"code":   describe(obj{"type": "integer", "minimum": -1, "maximum": 255}, "The exit status; -1 when a signal ended it."),
		"signal": str("The signal that ended it, if one did."),
		"reason": enumOf("Why the process ended.", fleet.ExitReasons()),
	})
	return into
}

// diffSchema is fleet.DiffStat.
var diffSchema = object([]string{"files", "insertions", "deletions"}, obj{
	"files": integer(""), "insertions": integer(""), "deletions": integer(""),
})

func enum(desc string, values ...string) obj {
	return describe(obj{"type": "string", "enum": values}, desc)
}

// enumOf is the enum of a list of constants (fleet's, mostly), so a value
// added there is documented here. An empty constant (a plain release, a
// task) is the field left out, never a value sent.
func enumOf[T ~string](desc string, values []T) obj {
	names := make([]string, 0, len(values))
	for _, v := range values {
		if v != "" {
			names = append(names, string(v))
		}
	}
	return enum(desc, names...)
}

// nullableEnumOf is enumOf for a field that may be null.
func nullableEnumOf[T ~string](desc string, values []T) obj {
	e := enumOf(desc, values)
	names := e["enum"].([]string)
	withNull := make([]any, 0, len(names)+1)
	for _, n := range names {
		withNull = append(withNull, n)
	}
	e["type"], e["enum"] = []string{"string", "null"}, append(withNull, nil)
	return e
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

func schemas() obj {
	terms := obj{}
	for _, t := range []string{"capabilityFit", "affinity", "load", "costFit", "health", "starvation"} {
		terms[t] = number("")
	}
	s := obj{
		"Error": object([]string{"error"}, obj{"error": object([]string{"code", "message"}, obj{
			"code":    enumOf("", apiCodes()),
			"message": str("A sentence for people."),
			"field":   str("The JSON path (or header, or query parameter) at fault, when one is."),
		})}),
		"Health": object([]string{"status"}, obj{"status": enum("", "ok")}),
		"Stage":  enumOf("", fleet.Stages),
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
			"priority":        enumOf("", fleet.Priorities()),
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
			"lastFailure": object(nil, obj{"reason": str(""), "kind": enumOf("The kind the holder named.", fleet.FailureKinds()),
				"retryable": boolean(""), "factoryId": str(""), "at": dateTime("")}),
			"parentId":       str("The job it is a child of (POST /fleet/jobs/{id}/children)."),
			"deps":           boundedList("Job ids that must ship first.", fleet.MaxDeps),
			"depsMode":       enumOf("", fleet.DepsModes()),
			"hasDependants":  boolean(""),
			"budget":         object(nil, obj{"wall": str("A duration such as 45m0s."), "usd": number("")}),
			"review":         ref("Review"),
			"kind":           enumOf("task (the default, omitted) runs its own step; composite ships when every child has.", fleet.JobKinds()),
			"rootId":         str("The root of the job's tree of children; absent on a root."),
			"depth":          integer("Levels below the root (0 for a root)."),
			"children":       stringList("The jobs posted as its children; while blocked it waits until every one shipped."),
			"idempotencyKey": str(""),
			"tracker": object([]string{"source", "itemId", "revision"}, obj{
				"source": name("The tracker."), "itemId": str("The item's id there."), "revision": integer("The item's revision the job carries."),
			}),
			"runReport": object([]string{"leaseEpoch", "usage"}, engineFacts(obj{
				"leaseEpoch": integer("The run (lease epoch) reported on."), "engine": str(""), "usage": usageSchema,
				"head": str("The commit delivered."), "diff": diffSchema,
			})),
			"admitted": describe(object([]string{"leaseEpoch"}, obj{
				"leaseEpoch":  integer("The lease the assignment granted."),
				"reservation": boolean("It reserved from the product's budget."),
				"seat":        boolean("It took a seat of the product's cap."),
			}), "What the assignment of the current (or last) lease took from its product; given back when the lease ends."),
			"pullRequest": object([]string{"repo", "number", "url", "headSha", "state"}, obj{
				"repo": str("owner/name on the forge."), "number": integer(""), "url": str(""), "headSha": str("The head the forge last showed."),
				"state": enumOf("", []fleet.PullRequestState{fleet.PROpen, fleet.PRClosed, fleet.PRMerged}),
			}),
			"iteration": integer("1 for the first delivery, one more for each changes-requested review or failing check that sent the job back."),
			"feedback": describe(arrayOf(object([]string{"iteration", "source", "body", "at"}, obj{
				"iteration": integer("The iteration it asks for."), "source": enumOf("", []fleet.FeedbackSource{fleet.FeedbackReview, fleet.FeedbackCheck}),
				"author": str("The reviewer's login, or the app that ran the check."), "name": str("The check's name."),
				"body": str("The review's text, or the check's title, summary and failing output."), "url": str(""), "at": dateTime(""),
			})), "What came back from the forge, the newest last (at most 20)."),
			"prSync": object([]string{"attempts"}, obj{"attempts": integer("Failed tries so far."), "lastError": str("The forge's last failure."),
				"nextAttemptAt": dateTime("")}),
			"forgeDeliveries": stringList("Webhook deliveries already applied (ids and body digests), so a redelivery changes nothing."),
			"forgeDue":        boolean("Its pull request waits to be opened or updated (prSync says how that goes)."),
			"runs": describe(arrayOf(ref("Run")), "The job's ended runs, oldest first (up to 16; "+
				"GET /fleet/jobs/{id}/runs lists them all, with the run in progress)."),
			"queuedAt": dateTime(""),
			"eventSeq": integer("The seq of the job's latest event."),
			"recentEvents": describe(arrayOf(ref("RecentEvent")), "The job's latest events (up to 8, seq ending at eventSeq), "+
				"committed with the changes they record (older ones are kept apart); GET /fleet/jobs/{id}/events lists them all."),
			"createdAt": dateTime(""),
			"updatedAt": dateTime(""),
		}),
		"Review": object([]string{"approvals"}, obj{
			"reviewers": boundedList("Operator names who may vote; empty means any operator.", fleet.MaxReviewers),
			"quorum":    integer("Approvals of distinct reviewers that pass the gate."),
			"onReject":  enumOf("requeue (default): back to the queue with the comment as feedback, no attempt spent; fail: failed.", fleet.OnRejects()),
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
				"id": name(""), "title": str(""), "stage": ref("Stage"), "kind": enumOf("", fleet.JobKinds()),
				"parentId": str(""), "deps": stringList(""), "depsMode": enumOf("", fleet.DepsModes()),
			})),
			"edges": arrayOf(object([]string{"from", "to", "kind"}, obj{"from": name(""), "to": name(""),
				"kind": enum("child: from the parent to the child; dep: from the dependency to the job waiting on it.", dag.EdgeChild, dag.EdgeDep)})),
			"counts": describe(obj{"type": "object", "additionalProperties": obj{"type": "integer"}}, "Nodes per stage."),
		}),
		"JobPage": object([]string{"items", "cursor"}, obj{"items": arrayOf(ref("Job")),
			"cursor": str("Pass as cursor for the next page; empty on the last page.")}),
		"Claimed": object([]string{"job", "leaseEpoch", "leaseExpiresAt"}, obj{
			"job": ref("Job"), "leaseEpoch": integer(""), "leaseExpiresAt": dateTime("")}),
		"LogAppended": object([]string{"size", "start"}, obj{
			"size":  integer("The log's size after the chunk: the offset the next chunk starts at."),
			"start": integer("The first offset the log still keeps (bytes before it passed the cap)."),
		}),
		"ForgeDelivery": object([]string{"outcome", "message"}, obj{
			"outcome": enum("", "applied", "ignored", "duplicate"), "message": str("Why, for people."),
		}),
		"RenewResponse": object([]string{"leaseExpiresAt", "cancelRequested", "preemptRequested"}, obj{"leaseExpiresAt": dateTime(""),
			"cancelRequested":  boolean("An operator cancelled the job: stop, checkpoint, release with outcome cancelled."),
			"preemptRequested": boolean("A critical job needs the seat: stop, checkpoint, release with outcome preempted.")}),
		"Run": object([]string{"id", "jobId", "factoryId", "leaseEpoch", "result", "startedAt"}, engineFacts(obj{
			"id": str("jobId:leaseEpoch"), "jobId": str(""), "productId": str(""), "factoryId": str(""),
			"leaseEpoch": integer(""), "result": enumOf("", fleet.RunResults()),
			"reason": str(""), "startedAt": dateTime(""), "endedAt": dateTime(""),
			"engine": str("The engine the holder reported."), "usage": usageSchema,
			"head": str("The commit the run delivered."), "diff": diffSchema,
		})),
		"Event": object([]string{"id", "jobId", "seq", "type", "actor", "at"}, eventProps()),
		// A job's own copy of its latest events: the same fields less the
		// ones the job names (id, jobId, productId).
		"RecentEvent": object([]string{"seq", "type", "actor", "at"}, eventProps()),
		"Artifact": object([]string{"id", "jobId", "productId", "runId", "name", "kind", "contentType", "size", "sha256", "createdAt"}, obj{
			"id": str("<jobId>.<suffix>"), "jobId": name(""), "productId": name(""),
			"runId": str("The run (jobId:leaseEpoch) that uploaded it; empty for an operator's."),
			"name":  name(""), "kind": enumOf("", fleet.ArtifactKinds()), "contentType": str(""),
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
				"depsMode": enumOf("", fleet.DepsModes()),
				"deps":     arrayOf(ref("WaitItem")), "children": arrayOf(ref("WaitItem")),
			}),
			"budget": holdSchema([]string{"kind", "message"}, "Why the product's budget holds the queued job back now.",
				fleet.HoldPaused, fleet.HoldCeiling),
			"seatCap": holdSchema([]string{"kind", "message", "running", "maxRunning"},
				"The product's maxRunning seats are all taken: the queued job waits for one to free.", fleet.HoldSeatCap),
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
			"id": name(""), "kind": enumOf("", fleet.FactoryKinds()), "productId": str("Its first product, or * for all."),
			"products": stringList("Products it serves; empty means every product."), "capabilities": stringList(""),
			"repos": stringList("Repos it has checked out."), "seatLimit": integer(""), "load": integer(""),
			"health": enumOf("", fleet.Healths()), "costPerHourUsd": number(""),
			"draining": boolean("True while an operator drains it (POST .../drain): no new assignments."),
			"cooldowns": describe(obj{"type": "object", "additionalProperties": dateTime("")},
				"engine:<name> -> until: its account was rate-limited, so jobs needing that engine go elsewhere until then."),
			"tokenId": str("The SHA-256 of its current token (not secret)."), "lastHeartbeatAt": dateTime(""),
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
			"forge":      describe(forgeSchema, "Where its delivered jobs become pull requests."),
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
				"kind":     enumOf("What the alert is about.", fleet.AlertKinds()),
				"severity": enumOf("", fleet.Severities()),
				"subject":  str("What it names: product/repo (starving), a factory id (stale_factory), product/job (dead_letter, failed, no_factory, blocked_on_failed, cancel_unacknowledged), a product (budget_alert, budget_paused)."),
				"since":    dateTime("When the condition began."),
				"message":  str("A sentence for a person."),
			})),
			"coordinator": describe(obj{"type": "object", "additionalProperties": obj{"type": "number"}},
				"This process's counters: claims, conflicts, lags, and the dispatch path by stage (stage{Submit,Wake,Schedule,Stamp,Publish}{Count,P50Ms,P99Ms}, once a stage has a sample). Fleet-wide: absent for a product-scoped token."),
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
		"PatchRequest": request([]string{"leaseEpoch"}, engineFacts(obj{
			"stage":      enumOf("building, review, testing or shipped; omit to set only the checkpoint.", fleet.Stages),
			"leaseEpoch": integer("The epoch the claim returned."),
			"checkpoint": describe(obj{"type": "string", "maxLength": 1024}, ""),
			"usage":      describe(usageSchema, "The run's usage so far (cumulative; see POST /fleet/jobs/{id}/usage)."),
			"head":       name("The commit the run delivered."),
			"diff":       describe(diffSchema, "The delivered change's git diff --shortstat against its base."),
		})),
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
			"outcome":    enumOf("Absent for a plain release.", fleet.ReleaseOutcomes()),
			"checkpoint": str("Where the holder's work is (aq/wip/<id>), recorded on the job.")}),
		"AcceptRequest": request([]string{"jobId", "dispatchEpoch"}, obj{
			"jobId": name(""), "dispatchEpoch": integer("From the dispatch message."),
			"productId": name("From the dispatch message; saves a lookup when x-product-id is absent."),
		}),
		"FailRequest": request([]string{"jobId", "leaseEpoch", "reason", "retryable"}, engineFacts(obj{
			"jobId": name(""), "leaseEpoch": integer(""), "reason": describe(obj{"type": "string"}, fmt.Sprintf(
				"Never refused for its text: stored with control characters escaped, cut to %d bytes.", fleet.MaxReasonLen)),
			"retryable": boolean("true: retry after a backoff; false: fail for good."),
			"productId": name("Saves a lookup when x-product-id is absent."),
			"usage":     describe(usageSchema, "The run's final usage, when known."),
			"kind": enumOf("What kind of failure: rate_limited spends no attempt and waits no backoff (send the cooldown here or in a heartbeat first).",
				fleet.FailureKinds()),
			"cooldowns": cooldownsSchema("added to the factory's stored set before the job is given back (the later until wins); how a factory that sends no heartbeat, an elastic pool's execution, reports a rate limit."),
		})),
		"UsageRequest": request([]string{"leaseEpoch", "usd"}, engineFacts(obj{
			"leaseEpoch": integer("The epoch the claim returned."), "usd": describe(obj{"type": "number", "minimum": 0, "maximum": fleet.MaxUSD}, "Cumulative USD."),
			"inputTokens": describe(obj{"type": "integer", "minimum": 0}, "Cumulative."), "outputTokens": describe(obj{"type": "integer", "minimum": 0}, "Cumulative."),
			"cacheReadTokens":  describe(obj{"type": "integer", "minimum": 0}, "Cumulative prompt-cache reads."),
			"cacheWriteTokens": describe(obj{"type": "integer", "minimum": 0}, "Cumulative prompt-cache writes."),
			"engine":           name("The engine running the job."),
		})),
		"BudgetRequest": request([]string{"ceilingUsd"}, obj{
			"ceilingUsd":    describe(obj{"type": "number", "exclusiveMinimum": 0, "maximum": fleet.MaxUSD}, "The most the product may spend per period."),
			"period":        enumOf("Default month (calendar month, UTC).", fleet.BudgetPeriods()),
			"alertAt":       describe(obj{"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "budget_alert once spend reaches this fraction of the ceiling; default 0.8."),
			"autoPause":     boolean("Pause the product when spend reaches the ceiling; default true."),
			"defaultJobUsd": describe(obj{"type": "number", "minimum": 0, "maximum": fleet.MaxUSD}, "The estimate of a job that names no budget.usd; default 0."),
		}),
		"PauseRequest": request(nil, obj{"reason": describe(obj{"type": "string", "maxLength": 2000}, "Why, for people.")}),
		"Budget": object([]string{"productId", "ceilingUsd", "period", "periodStart", "spentUsd", "reservedUsd", "remainingUsd",
			"paused", "pausedReason", "alertAt", "autoPause", "updatedAt"}, obj{
			"productId": name(""), "ceilingUsd": number(""), "period": enumOf("", fleet.BudgetPeriods()),
			"periodStart": dateTime(""), "spentUsd": number("Settled spend this period."),
			"reservedUsd":  number("Estimates held for runs admitted and not yet settled."),
			"remainingUsd": number("ceiling - spent - reserved, at least 0."), "paused": boolean(""),
			"pausedReason": nullableEnumOf("", fleet.PauseReasons()),
			"pauseMessage": str("The operator's reason, or the spend that paused it."),
			"alertAt":      number(""), "autoPause": boolean(""), "defaultJobUsd": number(""), "updatedAt": dateTime(""),
		}),
		"Burndown": object([]string{"productId", "ceilingUsd", "periodStart", "points", "forecastExhaustedAt"}, obj{
			"productId": name(""), "ceilingUsd": number(""), "periodStart": dateTime(""),
			"points":              arrayOf(object([]string{"at", "spentUsd"}, obj{"at": dateTime(""), "spentUsd": number("Cumulative spend of the period.")})),
			"forecastExhaustedAt": describe(obj{"type": []string{"string", "null"}, "format": "date-time"}, "null when spend will not reach the ceiling this period."),
		}),
		"EnrollRequest": request([]string{"factoryId"}, obj{
			"factoryId": name(""), "kind": enumOf("Default static.", fleet.FactoryKinds()),
			"products":       boundedList("Products it serves; empty or absent means every product.", fleet.MaxProducts),
			"capabilities":   boundedList("kind:value, such as os:linux or engine:claude; also the token's capability scope.", fleet.MaxCapabilities),
			"seatLimit":      describe(obj{"type": "integer", "minimum": 0, "maximum": 1000}, "0 means 1."),
			"costPerHourUsd": describe(obj{"type": "number", "minimum": 0}, ""),
		}),
		"HeartbeatRequest": request([]string{"capabilities", "repos"}, obj{
			"capabilities": boundedList("Replaces the stored list; [] for none.", fleet.MaxCapabilities),
			"repos":        boundedList("Replaces the stored list; [] for none.", fleet.MaxRepos),
			"load":         describe(obj{"type": "integer", "minimum": 0}, "Jobs running now."),
			"health":       enumOf("Default ok.", fleet.ReportedHealths()),
			"seatLimit":    describe(obj{"type": "integer", "minimum": 0, "maximum": 1000}, "0 leaves it unchanged."),
			"cooldowns":    cooldownsSchema("replaces the stored set."),
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
				"At most this many of the product's jobs hold a lease at once (claim, accept and dispatch wait for a seat); 0 or absent: uncapped."),
			"forge": describe(withNoExtras(forgeSchema), "Where delivered jobs become pull requests (API.md \"Pull requests\"); null removes it, absent keeps it; "+
				"kind, mergeMethod and maxIterations may be left out for their defaults."),
		}),
	}
	// A submission answers the job with its warnings beside its fields.
	job := s["Job"].(obj)
	props := maps.Clone(job["properties"].(obj))
	props["warnings"] = describe(arrayOf(str("")),
		"What keeps the job from running as the fleet stands, e.g. \"no factory has capability gpu:h100\": said at submit; the job is stored all the same. Absent when nothing does.")
	s["Submitted"] = object(job["required"].([]string), props)
	return s
}

// withNoExtras is a copy of an object schema that refuses unknown
// properties and requires only what a request must send.
func withNoExtras(s obj) obj {
	out := obj{}
	for k, v := range s {
		out[k] = v
	}
	out["required"] = []string{"repos"}
	out["additionalProperties"] = false
	return out
}

// cooldownsSchema is a heartbeat's or a failure's cooldowns; how says what
// is done with them.
func cooldownsSchema(how string) obj {
	return describe(obj{"type": "object", "maxProperties": fleet.MaxCooldowns, "additionalProperties": dateTime("")},
		"engine:<name> -> until (at most 24 h ahead): the engine's account is rate-limited; "+how)
}
