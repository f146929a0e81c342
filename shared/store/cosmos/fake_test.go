package cosmos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCosmos is a policy.Transporter that speaks the part of the Cosmos DB
// REST protocol the SDK uses for this adapter — account metadata, database
// and container CRUD, partition key ranges, documents, patch, queries and the
// change feed — over an in-memory account with one partition key range per
// container. It records every request, and rules can answer chosen requests
// with canned responses (412, 429, 503, …) before the fake itself does.
//
// Its query engine accepts exactly the grammar BuildQuery emits and answers
// 400 to anything else, and, like the gateway, 400 to ORDER BY, TOP,
// DISTINCT, GROUP BY, OFFSET or aggregates without a partition key.
type fakeCosmos struct {
	t        testing.TB
	endpoint string

	mu    sync.Mutex
	reqs  []recorded
	rules []*rule
	dbs   map[string]bool
	colls map[string]*fakeColl // "db/coll"
	lsn   int64
	// emptyCrossPages makes every cross-partition query answer this many
	// empty pages carrying a continuation before its results, as the
	// gateway does when it visits partitions without matches.
	emptyCrossPages int
}

// recorded is one HTTP request as the transport received it.
type recorded struct {
	Method   string
	Path     string
	Header   http.Header
	Body     []byte
	Deadline time.Time // zero when the request context had none
}

// docOp reports whether the request addresses documents of a collection.
func (r recorded) docOp() bool {
	_, ok := collectionOf(r.Path)
	return ok
}

// pointOp reports a request on one document (/docs/{id}) or a document
// create/upsert (POST /docs without the query header).
func (r recorded) pointOp() bool {
	seg := strings.Split(strings.Trim(r.Path, "/"), "/")
	if len(seg) == 6 && seg[4] == "docs" {
		return true
	}
	return len(seg) == 5 && seg[4] == "docs" && r.Method == http.MethodPost && r.Header.Get(headerIsQuery) == ""
}

func (r recorded) isQuery() bool { return r.Header.Get(headerIsQuery) != "" }

// isChangeFeed reports a document change-feed read (the SDK reads partition
// key ranges with A-IM too).
func (r recorded) isChangeFeed() bool {
	return r.Header.Get("A-IM") != "" && strings.HasSuffix(r.Path, "/docs")
}

type rule struct {
	match     func(recorded) bool
	responses []canned // answered in order; the last repeats when sticky
	sticky    bool
	used      int
}

type canned struct {
	status int
	header map[string]string
	body   string
	// hang makes the transport block until the request context ends, as a
	// server that never answers would.
	hang bool
	// fail makes the transport return this error instead of a response.
	fail error
}

type fakeColl struct {
	db, id, rid string
	props       map[string]json.RawMessage
	pkField     string
	ranges      int                 // partition key ranges, documents spread by a hash of their key
	docs        map[string]*fakeDoc // pk + "\x00" + id
}

// rangeOf is the partition key range holding partition key pk.
func (c *fakeColl) rangeOf(pk string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pk))
	return int(h.Sum32() % uint32(c.ranges))
}

// rangeBounds returns the effective-partition-key bounds of range i, as
// two-digit hex like the service's ("" and "FF" at the ends).
func (c *fakeColl) rangeBounds(i int) (string, string) {
	lo, hi := "", "FF"
	if i > 0 {
		lo = fmt.Sprintf("%02X", i*256/c.ranges)
	}
	if i < c.ranges-1 {
		hi = fmt.Sprintf("%02X", (i+1)*256/c.ranges)
	}
	return lo, hi
}

type fakeDoc struct {
	pk, id string
	body   map[string]json.RawMessage // without system properties
	etag   string
	lsn    int64
	at     time.Time // when last written, for If-Modified-Since
}

var fakeSeq atomic.Int64

// newFake returns a fake account with a unique endpoint: the SDK caches
// topology and partition key ranges per endpoint process-wide, so fakes must
// not share one.
func newFake(t testing.TB) *fakeCosmos {
	return &fakeCosmos{
		t:        t,
		endpoint: fmt.Sprintf("https://fake%d.documents.azure.com:443/", fakeSeq.Add(1)),
		dbs:      map[string]bool{},
		colls:    map[string]*fakeColl{},
	}
}

// on answers requests matching match with the given responses, in order.
func (f *fakeCosmos) on(match func(recorded) bool, responses ...canned) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &rule{match: match, responses: responses})
}

// always answers every request matching match with c.
func (f *fakeCosmos) always(match func(recorded) bool, c canned) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &rule{match: match, responses: []canned{c}, sticky: true})
}

// requests returns the recorded requests matching match (all when nil).
func (f *fakeCosmos) requests(match func(recorded) bool) []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []recorded
	for _, r := range f.reqs {
		if match == nil || match(r) {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeCosmos) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = nil
}

// addContainers creates the database and all coord containers directly.
func (f *fakeCosmos) addContainers(db string, defs map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dbs[db] = true
	for name, pk := range defs {
		props := map[string]json.RawMessage{
			"id":           mustJSON(name),
			"partitionKey": mustJSON(map[string]any{"paths": []string{pk}, "kind": "Hash", "version": 2}),
		}
		f.createColl(db, name, props)
	}
}

func (f *fakeCosmos) createColl(db, name string, props map[string]json.RawMessage) *fakeColl {
	var pkDef struct {
		Paths []string `json:"paths"`
	}
	_ = json.Unmarshal(props["partitionKey"], &pkDef)
	field := ""
	if len(pkDef.Paths) == 1 {
		field = strings.TrimPrefix(pkDef.Paths[0], "/")
	}
	rid := fmt.Sprintf("rid%d", len(f.colls)+1)
	props["_rid"] = mustJSON(rid)
	props["_self"] = mustJSON("dbs/" + db + "/colls/" + name + "/")
	props["_etag"] = mustJSON(`"c1"`)
	props["_ts"] = mustJSON(1)
	c := &fakeColl{db: db, id: name, rid: rid, props: props, pkField: field, ranges: 1, docs: map[string]*fakeDoc{}}
	f.colls[db+"/"+name] = c
	return c
}

// setRanges splits a container into n partition key ranges.
func (f *fakeCosmos) setRanges(db, name string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.colls[db+"/"+name].ranges = n
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Do implements policy.Transporter.
func (f *fakeCosmos) Do(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		body = b
	}
	if err := req.Context().Err(); err != nil {
		return nil, err // as net/http does for a request whose context ended
	}
	rec := recorded{Method: req.Method, Path: req.URL.Path, Header: req.Header.Clone(), Body: body}
	rec.Deadline, _ = req.Context().Deadline()

	f.mu.Lock()
	f.reqs = append(f.reqs, rec)
	for _, r := range f.rules {
		if !r.match(rec) {
			continue
		}
		if r.used < len(r.responses) || r.sticky {
			c := r.responses[min(r.used, len(r.responses)-1)]
			r.used++
			if c.hang {
				f.mu.Unlock()
				<-req.Context().Done()
				return nil, req.Context().Err()
			}
			if c.fail != nil {
				f.mu.Unlock()
				return nil, c.fail
			}
			resp := f.respond(req, c.status, c.header, []byte(c.body))
			f.mu.Unlock()
			return resp, nil
		}
	}
	status, header, out := f.serve(rec)
	resp := f.respond(req, status, header, out)
	f.mu.Unlock()
	return resp, nil
}

func (f *fakeCosmos) respond(req *http.Request, status int, header map[string]string, body []byte) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(headerActivityID, fmt.Sprintf("act-%d", len(f.reqs)))
	h.Set(headerRequestCharge, "1.5")
	for k, v := range header {
		h.Set(k, v)
	}
	return &http.Response{
		StatusCode:    status,
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

func errorBody(code, msg string) []byte {
	return mustJSON(map[string]string{"code": code, "message": msg})
}

// serve answers a request from the in-memory account. Called with f.mu held.
func (f *fakeCosmos) serve(r recorded) (int, map[string]string, []byte) {
	seg := strings.Split(strings.Trim(r.Path, "/"), "/")
	if len(seg) == 1 && seg[0] == "" {
		seg = nil
	}
	switch {
	case len(seg) == 0 && r.Method == http.MethodGet:
		loc := []map[string]string{{"name": "Fake Region", "databaseAccountEndpoint": f.endpoint}}
		return 200, nil, mustJSON(map[string]any{
			"id": "fake", "_self": "", "writableLocations": loc, "readableLocations": loc,
			"enableMultipleWriteLocations": false,
			"userConsistencyPolicy":        map[string]string{"defaultConsistencyLevel": "Session"},
		})
	case len(seg) == 1 && seg[0] == "dbs" && r.Method == http.MethodPost:
		var p struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(r.Body, &p); err != nil || p.ID == "" {
			return 400, nil, errorBody("BadRequest", "bad database body")
		}
		if f.dbs[p.ID] {
			return 409, nil, errorBody("Conflict", "database exists")
		}
		f.dbs[p.ID] = true
		return 201, nil, mustJSON(map[string]any{"id": p.ID, "_rid": "db1", "_self": "dbs/db1/", "_etag": `"d1"`, "_ts": 1})
	case len(seg) == 2 && seg[0] == "dbs" && r.Method == http.MethodDelete:
		if !f.dbs[seg[1]] {
			return 404, nil, errorBody("NotFound", "no database")
		}
		delete(f.dbs, seg[1])
		for k := range f.colls {
			if strings.HasPrefix(k, seg[1]+"/") {
				delete(f.colls, k)
			}
		}
		return 204, nil, nil
	case len(seg) == 3 && seg[2] == "colls" && r.Method == http.MethodPost:
		if !f.dbs[seg[1]] {
			return 404, nil, errorBody("NotFound", "no database")
		}
		var props map[string]json.RawMessage
		if err := json.Unmarshal(r.Body, &props); err != nil {
			return 400, nil, errorBody("BadRequest", "bad container body")
		}
		var id string
		_ = json.Unmarshal(props["id"], &id)
		if _, ok := f.colls[seg[1]+"/"+id]; ok {
			return 409, nil, errorBody("Conflict", "container exists")
		}
		c := f.createColl(seg[1], id, props)
		return 201, nil, mustJSON(c.props)
	}
	if len(seg) < 4 || seg[0] != "dbs" || seg[2] != "colls" {
		return 400, nil, errorBody("BadRequest", "fake: unsupported request "+r.Method+" "+r.Path)
	}
	c, ok := f.colls[seg[1]+"/"+seg[3]]
	if !ok {
		return 404, nil, errorBody("NotFound", "no container "+seg[3])
	}
	switch {
	case len(seg) == 4 && r.Method == http.MethodGet:
		return 200, map[string]string{"etag": `"c1"`}, mustJSON(c.props)
	case len(seg) == 5 && seg[4] == "pkranges" && r.Method == http.MethodGet:
		const etag = `"pkr1"`
		if r.Header.Get("If-None-Match") == etag {
			return 304, map[string]string{"etag": etag}, nil
		}
		var ranges []map[string]any
		for i := range c.ranges {
			lo, hi := c.rangeBounds(i)
			ranges = append(ranges, map[string]any{
				"id": strconv.Itoa(i), "_rid": fmt.Sprintf("%s%d", c.rid, i), "minInclusive": lo, "maxExclusive": hi,
				"ridPrefix": i, "status": "online", "parents": []string{},
			})
		}
		return 200, map[string]string{"etag": etag}, mustJSON(map[string]any{
			"_rid": c.rid, "PartitionKeyRanges": ranges, "_count": len(ranges),
		})
	case len(seg) == 5 && seg[4] == "docs" && r.Method == http.MethodGet && r.isChangeFeed():
		return f.changeFeed(c, r)
	case len(seg) == 5 && seg[4] == "docs" && r.Method == http.MethodPost && r.isQuery():
		return f.query(c, r)
	case len(seg) == 5 && seg[4] == "docs" && r.Method == http.MethodPost:
		return f.write(c, r, "", strings.EqualFold(r.Header.Get("x-ms-documentdb-is-upsert"), "true"))
	case len(seg) == 6 && seg[4] == "docs":
		return f.item(c, r, seg[5])
	}
	return 400, nil, errorBody("BadRequest", "fake: unsupported request "+r.Method+" "+r.Path)
}

// headerPK parses x-ms-documentdb-partitionkey (a JSON array of one string).
func headerPK(r recorded) (string, bool) {
	var vals []string
	if err := json.Unmarshal([]byte(r.Header.Get("x-ms-documentdb-partitionkey")), &vals); err != nil || len(vals) != 1 {
		return "", false
	}
	return vals[0], true
}

func (f *fakeCosmos) render(c *fakeColl, d *fakeDoc, withLSN bool) json.RawMessage {
	m := make(map[string]json.RawMessage, len(d.body)+6)
	for k, v := range d.body {
		m[k] = v
	}
	m["_rid"] = mustJSON(c.rid + "d")
	m["_self"] = mustJSON("dbs/x/colls/y/docs/" + d.id + "/")
	m["_etag"] = mustJSON(d.etag)
	m["_attachments"] = mustJSON("attachments/")
	m["_ts"] = mustJSON(1700000000 + d.lsn)
	if withLSN {
		m["_lsn"] = mustJSON(d.lsn)
	}
	return mustJSON(m)
}

func (f *fakeCosmos) docHeaders(d *fakeDoc) map[string]string {
	h := map[string]string{headerSessionToken: fmt.Sprintf("0:-1#%d", f.lsn)}
	if d != nil {
		h["etag"] = d.etag
	}
	return h
}

// commit stores d with a new LSN and ETag.
func (f *fakeCosmos) commit(c *fakeColl, d *fakeDoc) {
	f.lsn++
	d.lsn = f.lsn
	d.at = time.Now()
	d.etag = fmt.Sprintf(`"0000%04d-0000-0000-0000-000000000000"`, f.lsn)
	c.docs[d.pk+"\x00"+d.id] = d
}

func minimal(r recorded) bool { return r.Header.Get("Prefer") == "return=minimal" }

// write creates, upserts (id "") or replaces (id set) a document.
func (f *fakeCosmos) write(c *fakeColl, r recorded, urlID string, upsert bool) (int, map[string]string, []byte) {
	pk, ok := headerPK(r)
	if !ok {
		return 400, nil, errorBody("BadRequest", "partition key header missing")
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return 400, nil, errorBody("BadRequest", "body is not a JSON object")
	}
	var id, docPK string
	if err := json.Unmarshal(body["id"], &id); err != nil || id == "" {
		return 400, nil, errorBody("BadRequest", "The input content is invalid because the required properties - 'id; ' - are missing")
	}
	if err := json.Unmarshal(body[c.pkField], &docPK); err != nil || docPK != pk {
		return 400, nil, errorBody("BadRequest", "PartitionKey extracted from document doesn't match the one specified in the header")
	}
	if urlID != "" && urlID != id {
		return 400, nil, errorBody("BadRequest", "id in body does not match the URL")
	}
	for k := range body {
		if systemFields[k] {
			delete(body, k)
		}
	}
	key := pk + "\x00" + id
	old := c.docs[key]
	status := 201
	switch {
	case urlID != "": // replace
		if old == nil {
			return 404, nil, errorBody("NotFound", "Entity with the specified id does not exist in the system.")
		}
		if m := r.Header.Get("If-Match"); m != "" && m != old.etag {
			return 412, nil, errorBody("PreconditionFailed", "Operation cannot be performed because one of the specified precondition is not met.")
		}
		status = 200
	case upsert:
		if old != nil {
			if m := r.Header.Get("If-Match"); m != "" && m != old.etag {
				return 412, nil, errorBody("PreconditionFailed", "precondition")
			}
			status = 200
		}
	default:
		if old != nil {
			return 409, nil, errorBody("Conflict", "Entity with the specified id already exists in the system.")
		}
	}
	d := &fakeDoc{pk: pk, id: id, body: body}
	f.commit(c, d)
	if minimal(r) {
		return status, f.docHeaders(d), nil
	}
	return status, f.docHeaders(d), f.render(c, d, false)
}

func (f *fakeCosmos) item(c *fakeColl, r recorded, id string) (int, map[string]string, []byte) {
	pk, ok := headerPK(r)
	if !ok {
		return 400, nil, errorBody("BadRequest", "partition key header missing")
	}
	if r.Method == http.MethodPut {
		return f.write(c, r, id, false)
	}
	d := c.docs[pk+"\x00"+id]
	if d == nil {
		return 404, f.docHeaders(nil), errorBody("NotFound", "Entity with the specified id does not exist in the system.")
	}
	if m := r.Header.Get("If-Match"); m != "" && r.Method != http.MethodGet && m != d.etag {
		return 412, nil, errorBody("PreconditionFailed", "precondition")
	}
	switch r.Method {
	case http.MethodGet:
		return 200, f.docHeaders(d), f.render(c, d, false)
	case http.MethodDelete:
		delete(c.docs, pk+"\x00"+id)
		f.lsn++
		return 204, f.docHeaders(nil), nil
	case http.MethodPatch:
		var p struct {
			Condition  *string `json:"condition"`
			Operations []struct {
				Op    string          `json:"op"`
				Path  string          `json:"path"`
				Value json.RawMessage `json:"value"`
			} `json:"operations"`
		}
		if err := json.Unmarshal(r.Body, &p); err != nil {
			return 400, nil, errorBody("BadRequest", "bad patch")
		}
		if p.Condition != nil {
			// The one predicate the adapter sends: two fields equal.
			m := patchCondition.FindStringSubmatch(*p.Condition)
			if m == nil {
				return 400, nil, errorBody("BadRequest", "fake: unsupported condition "+*p.Condition)
			}
			// Numbers only: the adapter compares counters.
			var a, b float64
			ra, okA := d.body[m[1]]
			rb, okB := d.body[m[2]]
			if !okA || !okB || json.Unmarshal(ra, &a) != nil || json.Unmarshal(rb, &b) != nil || a != b {
				return 412, nil, errorBody("PreconditionFailed", "One of the specified pre-condition is not met.")
			}
		}
		nd := &fakeDoc{pk: d.pk, id: d.id, body: map[string]json.RawMessage{}}
		for k, v := range d.body {
			nd.body[k] = v
		}
		for _, op := range p.Operations {
			field := strings.TrimPrefix(op.Path, "/")
			if op.Op != "incr" || strings.Contains(field, "/") {
				return 400, nil, errorBody("BadRequest", "fake: unsupported patch "+op.Op)
			}
			var delta, cur int64
			if err := json.Unmarshal(op.Value, &delta); err != nil {
				return 400, nil, errorBody("BadRequest", "bad incr value")
			}
			if raw, ok := nd.body[field]; ok {
				if err := json.Unmarshal(raw, &cur); err != nil {
					return 400, nil, errorBody("BadRequest", "incr on a non-integer")
				}
			}
			sum := cur + delta
			if (delta > 0 && sum < cur) || (delta < 0 && sum > cur) {
				return 400, nil, errorBody("BadRequest", "incr overflows")
			}
			nd.body[field] = mustJSON(sum)
		}
		f.commit(c, nd)
		if minimal(r) {
			return 200, f.docHeaders(nd), nil
		}
		return 200, f.docHeaders(nd), f.render(c, nd, false)
	}
	return 400, nil, errorBody("BadRequest", "fake: unsupported method "+r.Method)
}

// patchCondition is the filter predicate IncrementIfEqual sends.
var patchCondition = regexp.MustCompile(`^FROM c WHERE c\.(\w+) = c\.(\w+)$`)

func (f *fakeCosmos) changeFeed(c *fakeColl, r recorded) (int, map[string]string, []byte) {
	var from int64
	if m := r.Header.Get("If-None-Match"); m != "" {
		n, err := strconv.ParseInt(strings.Trim(m, `"`), 10, 64)
		if err != nil {
			return 400, nil, errorBody("BadRequest", "bad If-None-Match "+m)
		}
		from = n
	}
	// A range read the first time from a start time (StartFrom): the
	// service compares at second granularity (RFC 1123), so a document of
	// the same second is returned too.
	var since time.Time
	if m := r.Header.Get("If-Modified-Since"); m != "" && r.Header.Get("If-None-Match") == "" {
		t, err := time.Parse(time.RFC1123, m)
		if err != nil {
			return 400, nil, errorBody("BadRequest", "bad If-Modified-Since "+m)
		}
		since = t
	}
	limit := 100
	if v := r.Header.Get("x-ms-max-item-count"); v != "" {
		limit, _ = strconv.Atoi(v)
	}
	rangeID := -1
	if v := r.Header.Get("x-ms-documentdb-partitionkeyrangeid"); v != "" {
		rangeID, _ = strconv.Atoi(v)
	}
	var docs []*fakeDoc
	for _, d := range c.docs {
		if d.lsn > from && (rangeID < 0 || c.rangeOf(d.pk) == rangeID) && !d.at.Truncate(time.Second).Before(since) {
			docs = append(docs, d)
		}
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].lsn < docs[j].lsn })
	if len(docs) == 0 {
		return 304, map[string]string{"etag": fmt.Sprintf(`"%d"`, max(from, f.lsn))}, nil
	}
	if limit > 0 && len(docs) > limit {
		docs = docs[:limit]
	}
	out := make([]json.RawMessage, len(docs))
	for i, d := range docs {
		out[i] = f.render(c, d, true)
	}
	return 200, map[string]string{"etag": fmt.Sprintf(`"%d"`, docs[len(docs)-1].lsn)},
		mustJSON(map[string]any{"_rid": c.rid, "Documents": out, "_count": len(out)})
}

var (
	queryShape   = regexp.MustCompile(`^SELECT \* FROM c(?: WHERE (.+?))?( ORDER BY c\.id( DESC)?)?$`)
	condShape    = regexp.MustCompile(`^(?:c\.([A-Za-z_][A-Za-z0-9_]*)|c\["([A-Za-z_][A-Za-z0-9_]*)"\]) (=|IN|<|>) (.+)$`)
	paramList    = regexp.MustCompile(`^\((@p\d+(?:, @p\d+)*)\)$`)
	crossRefused = regexp.MustCompile(`(?i)\b(ORDER\s+BY|TOP|DISTINCT|GROUP\s+BY|OFFSET|LIMIT|COUNT|SUM|AVG|MIN|MAX|VALUE)\b`)
)

// fakeLess is Cosmos DB's < on two JSON values: strings by code point,
// numbers numerically, values of different types never (undefined).
func fakeLess(v, bound any) bool {
	switch b := bound.(type) {
	case string:
		s, ok := v.(string)
		return ok && s < b
	case float64:
		n, ok := v.(float64)
		return ok && n < b
	}
	return false
}

func (f *fakeCosmos) query(c *fakeColl, r recorded) (int, map[string]string, []byte) {
	var q struct {
		Query      string `json:"query"`
		Parameters []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(r.Body, &q); err != nil {
		return 400, nil, errorBody("BadRequest", "bad query body")
	}
	pk, partitioned := headerPK(r)
	if !partitioned && crossRefused.MatchString(q.Query) {
		return 400, nil, errorBody("BadRequest", "Cross partition query only supports 'VALUE <AggreateFunc>' for aggregates.")
	}
	if !partitioned && r.Header.Get("x-ms-documentdb-query-enablecrosspartition") != "true" {
		return 400, nil, errorBody("BadRequest", "Cross partition query is required but disabled.")
	}
	m := queryShape.FindStringSubmatch(q.Query)
	if m == nil {
		return 400, nil, errorBody("BadRequest", "fake: unsupported query "+q.Query)
	}
	params := map[string]any{}
	for _, p := range q.Parameters {
		var v any
		if err := json.Unmarshal(p.Value, &v); err != nil {
			return 400, nil, errorBody("BadRequest", "bad parameter "+p.Name)
		}
		params[p.Name] = v
	}
	type cond struct {
		field string
		less  bool // field < vals[0]
		more  bool // field > vals[0]; with neither, field equals one of vals
		vals  []any
	}
	var conds []cond
	if m[1] != "" {
		for _, part := range strings.Split(m[1], " AND ") {
			cm := condShape.FindStringSubmatch(part)
			if cm == nil {
				return 400, nil, errorBody("BadRequest", "fake: unsupported condition "+part)
			}
			field := cm[1] + cm[2]
			var names []string
			if cm[3] != "IN" {
				names = []string{cm[4]}
			} else {
				pl := paramList.FindStringSubmatch(cm[4])
				if pl == nil {
					return 400, nil, errorBody("BadRequest", "fake: unsupported IN list "+cm[4])
				}
				names = strings.Split(pl[1], ", ")
			}
			cd := cond{field: field, less: cm[3] == "<", more: cm[3] == ">"}
			for _, n := range names {
				v, ok := params[n]
				if !ok {
					return 400, nil, errorBody("BadRequest", "undefined parameter "+n)
				}
				cd.vals = append(cd.vals, v)
			}
			conds = append(conds, cd)
		}
	}
	var docs []*fakeDoc
	for _, d := range c.docs {
		if partitioned && d.pk != pk {
			continue
		}
		match := true
		for _, cd := range conds {
			raw, ok := d.body[cd.field]
			if !ok {
				match = false
				break
			}
			var v any
			_ = json.Unmarshal(raw, &v)
			var holds bool
			switch {
			case cd.less:
				holds = fakeLess(v, cd.vals[0])
			case cd.more:
				holds = fakeLess(cd.vals[0], v)
			default:
				holds = slices.ContainsFunc(cd.vals, func(x any) bool { return reflect.DeepEqual(x, v) })
			}
			if !holds {
				match = false
				break
			}
		}
		if match {
			docs = append(docs, d)
		}
	}
	// ORDER BY c.id within a partition; cross-partition results come in
	// (pk, id) order here, which callers must not rely on.
	sort.Slice(docs, func(i, j int) bool {
		if docs[i].pk != docs[j].pk {
			return docs[i].pk < docs[j].pk
		}
		return docs[i].id < docs[j].id
	})
	if m[3] != "" {
		slices.Reverse(docs)
	}

	offset := 0
	cont := r.Header.Get("x-ms-continuation")
	header := map[string]string{}
	switch {
	case !partitioned && f.emptyCrossPages > 0 && (cont == "" || strings.HasPrefix(cont, "empty:")):
		n := 0
		if cont != "" {
			n, _ = strconv.Atoi(strings.TrimPrefix(cont, "empty:"))
		}
		if n < f.emptyCrossPages {
			header["x-ms-continuation"] = fmt.Sprintf("empty:%d", n+1)
			return 200, header, mustJSON(map[string]any{"_rid": c.rid, "Documents": []any{}, "_count": 0})
		}
	case strings.HasPrefix(cont, "off:"):
		offset, _ = strconv.Atoi(strings.TrimPrefix(cont, "off:"))
	case cont != "":
		return 400, nil, errorBody("BadRequest", "bad continuation "+cont)
	}
	limit := 100
	if v := r.Header.Get("x-ms-max-item-count"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			limit = n
		}
	}
	docs = docs[min(offset, len(docs)):]
	if len(docs) > limit {
		docs = docs[:limit]
		header["x-ms-continuation"] = fmt.Sprintf("off:%d", offset+limit)
	}
	out := make([]json.RawMessage, len(docs))
	for i, d := range docs {
		out[i] = f.render(c, d, false)
	}
	return 200, header, mustJSON(map[string]any{"_rid": c.rid, "Documents": out, "_count": len(out)})
}
