// Package funchost speaks the Azure Functions custom-handler protocol: the
// invocation envelope the host POSTs to /{functionName}, the response
// envelope it expects back, and the trigger payloads inside (HTTP, timer,
// Cosmos DB change feed). The handler binary serves it; the local host
// emulator produces it.
package funchost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Invocation is the host's request: trigger and input bindings by binding
// name in Data, trigger metadata in Metadata.
type Invocation struct {
	Data     map[string]json.RawMessage `json:"Data"`
	Metadata map[string]json.RawMessage `json:"Metadata"`
}

// Result is the answer the host expects. It is always JSON and never empty:
// the host treats an empty body as a failure to parse.
type Result struct {
	Outputs     map[string]any `json:"Outputs"`
	Logs        []string       `json:"Logs"`
	ReturnValue any            `json:"ReturnValue"`
}

// Func handles one invocation of a function.
type Func func(ctx context.Context, inv *Invocation) (*Result, error)

// Unwrap peels the extra JSON string encoding the host adds to string values
// in Data: a Cosmos DB batch arrives as a string holding a string holding the
// array. Values that are not strings come back as they are.
func Unwrap(raw json.RawMessage) (json.RawMessage, error) {
	for range 3 {
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || raw[0] != '"' {
			return raw, nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("decode string value: %w", err)
		}
		inner := strings.TrimSpace(s)
		if inner == "" || !json.Valid([]byte(inner)) {
			// A plain string, not encoded JSON: hand it back as a JSON string.
			return raw, nil
		}
		raw = json.RawMessage(inner)
	}
	return raw, nil
}

// Documents decodes a cosmosDBTrigger batch (the array twice encoded as a
// string) into its documents, as DocumentFields does; it takes what
// encoding/json takes, and finds the same documents (FuzzDocuments).
func Documents(raw json.RawMessage) ([]json.RawMessage, error) {
	docs, err := DocumentFields(raw)
	if err != nil || docs == nil {
		return nil, err
	}
	out := make([]json.RawMessage, len(docs))
	for i, d := range docs {
		out[i] = d.Raw
	}
	return out, nil
}

// A Document is one document of a batch with the top-level string fields
// DocumentFields was asked for.
type Document struct {
	Raw json.RawMessage
	// Fields are the fields' values in the order asked, "" where absent.
	Fields []string
	// Exact is false when the walk could not tell the fields for sure (a
	// document that is not an object, a field that is not a string, a name
	// that differs from one asked for only in case, as encoding/json would
	// match it): the caller decodes Raw itself.
	Exact bool
}

// DocumentFields is Documents, reading the top-level string fields named on
// the way: the dispatch and echo functions need every changed job's
// address, and reading it in the pass that splits the batch, rather than
// decoding each document again, took a quarter off a batch's decoding
// (BenchmarkItems). It takes the batches encoding/json takes, finds the
// same documents, and where it reports Exact the fields are what
// encoding/json would decode (FuzzDocumentFields). Documents is it with no
// fields asked for.
func DocumentFields(raw json.RawMessage, names ...string) ([]Document, error) {
	inner, empty, err := peel(raw)
	if err != nil || empty {
		return nil, err
	}
	docs := []Document{}
	err = splitArray(inner, func(dec *jsontext.Decoder) error {
		start := dec.InputOffset()
		d, err := readFields(dec, names)
		if err != nil {
			return err
		}
		d.Raw = bytes.Clone(bytes.TrimLeft(inner[start:dec.InputOffset()], " \t\r\n,"))
		docs = append(docs, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("documents: want a JSON array: %w", err)
	}
	return docs, nil
}

// readFields reads one value from dec, an object's top-level names one at a
// time and the values of names as strings.
func readFields(dec *jsontext.Decoder, names []string) (Document, error) {
	d := Document{Fields: make([]string, len(names)), Exact: true}
	if dec.PeekKind() != '{' {
		d.Exact = false
		_, err := dec.ReadValue()
		return d, err
	}
	if _, err := dec.ReadToken(); err != nil {
		return d, err
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return d, err
		}
		name := tok.String()
		i := slices.Index(names, name)
		if i < 0 {
			if foldsToOneOf(name, names) {
				d.Exact = false
			}
			if err := dec.SkipValue(); err != nil {
				return d, err
			}
			continue
		}
		if dec.PeekKind() != '"' {
			d.Exact = false // null, or not a string: encoding/json decides
			if err := dec.SkipValue(); err != nil {
				return d, err
			}
			continue
		}
		if tok, err = dec.ReadToken(); err != nil {
			return d, err
		}
		d.Fields[i] = tok.String()
	}
	_, err := dec.ReadToken()
	return d, err
}

// foldsToOneOf reports whether encoding/json could match name to one of
// names other than exactly: the same letters in another case, or a name
// outside ASCII (Unicode case folding). It errs towards true, which only
// costs the caller a decode.
func foldsToOneOf(name string, names []string) bool {
	for i := range len(name) {
		if name[i] >= utf8.RuneSelf {
			return true
		}
	}
	for _, n := range names {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	return false
}

// peel takes off the string encodings around a batch's array, or reports
// an empty batch (no value, or null).
func peel(raw json.RawMessage) (inner []byte, empty bool, err error) {
	inner = bytes.TrimSpace(raw)
	peeled := false
	for range 3 {
		if len(inner) == 0 || inner[0] != '"' {
			break
		}
		s, err := appendUnquote(nil, inner)
		if err != nil {
			// jsontext refuses what encoding/json mends (an unpaired
			// surrogate, invalid UTF-8): let encoding/json decide.
			var str string
			if err := json.Unmarshal(inner, &str); err != nil {
				return nil, false, fmt.Errorf("decode string value: %w", err)
			}
			s = []byte(str)
		}
		inner, peeled = bytes.TrimSpace(s), true
	}
	if (len(inner) == 0 && !peeled) || string(inner) == "null" {
		return nil, true, nil
	}
	return inner, false, nil
}

// splitArray calls each for every value of the JSON array b, with the
// decoder before it (each must read exactly one value), and fails on
// anything but one array.
func splitArray(b []byte, each func(dec *jsontext.Decoder) error) error {
	dec := jsontext.NewDecoder(bytes.NewBuffer(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != '[' {
		return fmt.Errorf("found %v", tok.Kind())
	}
	for dec.PeekKind() != ']' {
		if err := each(dec); err != nil {
			return err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return fmt.Errorf("data after the array")
	}
	return nil
}

// EncodeDocuments produces the host's encoding of a batch: the array, as a
// JSON string, as a JSON string again. Each document must be JSON, as the
// store's are (it refuses anything else on write); they are joined as they
// are, not re-encoded.
func EncodeDocuments(docs []json.RawMessage) json.RawMessage {
	n := 0
	for _, d := range docs {
		n += len(d)
	}
	var w BatchWriter
	w.Begin(make([]byte, 0, EncodedSize(n)))
	for _, d := range docs {
		w.Add(d)
	}
	return w.End()
}

// EncodedSize is room for a batch of n document bytes in the host's
// encoding: twice quoted, a '"' takes four bytes, and a job has about one
// in ten.
func EncodedSize(n int) int { return n + n/2 + 16 }

// BatchWriter appends a batch in the host's encoding (EncodeDocuments) one
// document at a time, in one pass: each byte is escaped as two rounds of
// JSON string quoting escape it, without the array or the once-quoted
// string being built in between. The emulator encodes every change of
// every job this way.
type BatchWriter struct {
	b []byte
	n int
}

// Begin starts a batch at the end of dst.
func (w *BatchWriter) Begin(dst []byte) {
	w.b, w.n = append(dst, `"\"[`...), 0
}

// Add appends one document, the concatenation of parts. A part must not
// end inside a UTF-8 character (split before any byte that starts one, as
// at any ASCII byte): each is escaped on its own.
func (w *BatchWriter) Add(parts ...[]byte) {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
	for _, p := range parts {
		w.b = appendQuotedTwice(w.b, p)
	}
}

// End closes the batch and returns dst with it appended.
func (w *BatchWriter) End() []byte {
	b := append(w.b, `]\""`...)
	w.b = nil
	return b
}

// appendQuotedTwice appends src as jsontext.AppendQuote applied twice
// escapes it, without the quotes: the first round escapes '"', '\\' and
// control characters and replaces invalid UTF-8 with U+FFFD; the second
// escapes the backslashes and quotes the first added. Nothing else is
// escaped by either (neither HTML nor JavaScript escaping is asked for).
func appendQuotedTwice(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	i := 0
	for n := 0; n < len(src); {
		c := src[n]
		if c < utf8.RuneSelf {
			n++
			if c >= 0x20 && c != '"' && c != '\\' {
				continue
			}
			dst = append(dst, src[i:n-1]...)
			switch c {
			case '"':
				dst = append(dst, `\\\"`...)
			case '\\':
				dst = append(dst, `\\\\`...)
			case '\b':
				dst = append(dst, `\\b`...)
			case '\f':
				dst = append(dst, `\\f`...)
			case '\n':
				dst = append(dst, `\\n`...)
			case '\r':
				dst = append(dst, `\\r`...)
			case '\t':
				dst = append(dst, `\\t`...)
			default:
				dst = append(dst, '\\', '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i = n
			continue
		}
		r, size := utf8.DecodeRune(src[n:])
		n += size
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, src[i:n-1]...)
			dst = append(dst, "\ufffd"...)
			i = n
		}
	}
	return append(dst, src[i:]...)
}

// TimerInfo is a timerTrigger payload.
type TimerInfo struct {
	Schedule struct {
		AdjustForDST bool `json:"AdjustForDST"`
	} `json:"Schedule"`
	ScheduleStatus *ScheduleStatus `json:"ScheduleStatus"`
	IsPastDue      bool            `json:"IsPastDue"`
}

// ScheduleStatus is the timer's last and next occurrence, as the host's
// schedule monitor kept it when the run was due. It is null for timers
// without the monitor: useMonitor false, or a schedule firing more than once
// a minute.
type ScheduleStatus struct {
	Last        time.Time `json:"Last"`
	Next        time.Time `json:"Next"`
	LastUpdated time.Time `json:"LastUpdated"`
}

// UnmarshalJSON reads the host's timestamps, which are .NET DateTime values.
// One of unspecified kind is written without an offset, and the host's
// schedule monitor records a timer that never fired with Last =
// "0001-01-01T00:00:00": a strict RFC 3339 decode would fail the very first
// invocation of every new timer over a field no task reads. Such values are
// taken as UTC.
func (s *ScheduleStatus) UnmarshalJSON(b []byte) error {
	var raw struct {
		Last, Next, LastUpdated *string
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	var errs []error
	for _, f := range []struct {
		name string
		src  *string
		dst  *time.Time
	}{{"Last", raw.Last, &s.Last}, {"Next", raw.Next, &s.Next}, {"LastUpdated", raw.LastUpdated, &s.LastUpdated}} {
		t, err := parseHostTime(f.src)
		if err != nil {
			errs = append(errs, fmt.Errorf("ScheduleStatus.%s: %w", f.name, err))
		}
		*f.dst = t
	}
	return errors.Join(errs...)
}

// hostLocalLayout is a .NET round-trip ("o") DateTime of unspecified kind.
const hostLocalLayout = "2006-01-02T15:04:05.9999999"

func parseHostTime(s *string) (time.Time, error) {
	if s == nil || *s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, *s); err == nil {
		return t, nil
	}
	t, err := time.ParseInLocation(hostLocalLayout, *s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a timestamp", *s)
	}
	return t, nil
}

// Timer decodes a timer payload.
func Timer(raw json.RawMessage) (*TimerInfo, error) {
	inner, err := Unwrap(raw)
	if err != nil {
		return nil, err
	}
	var t TimerInfo
	if err := json.Unmarshal(inner, &t); err != nil {
		return nil, fmt.Errorf("timer payload: %w", err)
	}
	return &t, nil
}

// Server is the custom handler's HTTP server: the host's probe on "/",
// invocations on "/{function}", and forwarded HTTP requests (the host's
// enableForwardingHttpRequest) on their original paths.
type Server struct {
	funcs     map[string]Func
	forwarded http.Handler
	forwardAt string
	log       *slog.Logger
	probeID   string
}

// The local host emulator picks a free port, closes it and hands its
// number to the handler, as the Functions host does; between the two, the
// emulator of another stack on the machine can pick the same port, and its
// handler, bound first, would answer this one's probe and be sent its
// requests. So the emulator passes a nonce in ProbeIDEnv and takes only an
// answer carrying it in ProbeIDHeader. The Functions host sets no such
// variable, and the probe's answer is then as it always was.
const (
	ProbeIDEnv    = "FLEET_HOST_PROBE_ID"
	ProbeIDHeader = "X-Fleet-Probe-Id"
)

// AnswerProbeWith makes the answer to the host's probe carry id in
// ProbeIDHeader ("" sends none).
func (s *Server) AnswerProbeWith(id string) { s.probeID = id }

// NewServer builds a server. forwarded serves the requests the host forwards
// under forwardPrefix (e.g. "/api/"); nil disables forwarding.
func NewServer(log *slog.Logger, forwardPrefix string, forwarded http.Handler) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{funcs: map[string]Func{}, forwarded: forwarded, forwardAt: forwardPrefix, log: log}
}

// Handle registers a function by name.
func (s *Server) Handle(name string, f Func) { s.funcs[strings.ToLower(name)] = f }

// Functions lists the registered function names, sorted.
func (s *Server) Functions() []string {
	names := make([]string, 0, len(s.funcs))
	for n := range s.funcs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// MaxInvocationBytes bounds an invocation envelope. Cosmos batches of
// maxItemsPerInvocation job documents (each up to ~1 MiB of manifest) fit.
const MaxInvocationBytes = 128 << 20

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if path == "/" {
		// The host probes "/" until it gets any answer.
		if s.probeID != "" {
			w.Header().Set(ProbeIDHeader, s.probeID)
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok"))
		return
	}
	// Forwarded requests first: the host forwards a request for the bare
	// route prefix at its own path ("/api"), which is also the invocation
	// path of a function named like the prefix. With forwarding on, the host
	// invokes no http function by envelope, so the path is the request's.
	if s.forwarded != nil && (strings.HasPrefix(path, s.forwardAt) || path == strings.TrimSuffix(s.forwardAt, "/")) {
		s.forwarded.ServeHTTP(w, r)
		return
	}
	name := strings.ToLower(strings.TrimPrefix(path, "/"))
	if f, ok := s.funcs[name]; ok && r.Method == http.MethodPost {
		s.invoke(w, r, name, f)
		return
	}
	writeJSON(w, http.StatusNotFound, &Result{Outputs: map[string]any{}, Logs: []string{"no function " + name}})
}

func (s *Server) invoke(w http.ResponseWriter, r *http.Request, name string, f Func) {
	start := time.Now()
	body, err := readEnvelope(w, r)
	if err != nil {
		s.fail(w, name, start, fmt.Errorf("read invocation envelope: %w", err))
		return
	}
	inv, err := decodeInvocation(body)
	if err != nil {
		s.fail(w, name, start, fmt.Errorf("decode invocation envelope: %w", err))
		return
	}
	res, err := f(r.Context(), inv)
	if err != nil {
		s.fail(w, name, start, err)
		return
	}
	if res == nil {
		res = &Result{}
	}
	if res.Outputs == nil {
		res.Outputs = map[string]any{}
	}
	if res.Logs == nil {
		res.Logs = []string{}
	}
	s.log.Debug("invocation", "function", name, "ms", time.Since(start).Milliseconds())
	writeJSON(w, http.StatusOK, res)
}

// readEnvelope reads an invocation of at most MaxInvocationBytes. The host
// sends its length, so the envelope is read into one buffer of that size
// rather than one that grows (and is copied) as a change-feed batch comes
// in.
func readEnvelope(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, MaxInvocationBytes)
	if n := r.ContentLength; n > 0 && n <= MaxInvocationBytes {
		b := make([]byte, n)
		if _, err := io.ReadFull(body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(body)
}

// fail answers non-2xx, which the host records as a failed invocation; the
// body still is the envelope, so the reason reaches the host's logs.
func (s *Server) fail(w http.ResponseWriter, name string, start time.Time, err error) {
	s.log.Error("invocation failed", "function", name, "ms", time.Since(start).Milliseconds(), "err", err)
	writeJSON(w, http.StatusInternalServerError, &Result{Outputs: map[string]any{}, Logs: []string{err.Error()}})
}

// decodeInvocation decodes an envelope as encoding/json's Decoder does (the
// first JSON value; what follows it is not read). The host's own shape,
// {"Data":{...},"Metadata":{...}} with objects of values, takes a fast
// path: jsontext reads each value once and keeps it as it is, where
// encoding/json reads a change-feed batch (a long, escaped string) twice.
// Anything else (another field, null, a name in another case, a name that
// is not UTF-8) goes to encoding/json, so the result is its result.
func decodeInvocation(body []byte) (*Invocation, error) {
	if inv, ok := decodeHostShape(body); ok {
		return inv, nil
	}
	var inv Invocation
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&inv); err != nil {
		return nil, err
	}
	return &inv, nil
}

func decodeHostShape(body []byte) (*Invocation, bool) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, false
	}
	var inv Invocation
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, false
		}
		var into *map[string]json.RawMessage
		switch tok.String() {
		case "Data":
			into = &inv.Data
		case "Metadata":
			into = &inv.Metadata
		default:
			return nil, false
		}
		if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
			return nil, false
		}
		if *into == nil {
			*into = map[string]json.RawMessage{}
		}
		for dec.PeekKind() != '}' {
			tok, err := dec.ReadToken()
			if err != nil {
				return nil, false
			}
			name := tok.String() // the next read voids tok
			v, err := dec.ReadValue()
			if err != nil {
				return nil, false
			}
			(*into)[name] = bytes.Clone(v)
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, false
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, false
	}
	return &inv, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"Outputs":{},"Logs":["encode response failed"],"ReturnValue":null}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ErrBadPayload marks a trigger payload the handler cannot decode.
var ErrBadPayload = errors.New("bad trigger payload")
