package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/go-json-experiment/json/jsontext"
)

// contentTypeField names the Content-Type header in errors.
const contentTypeField = "Content-Type"

// mediaType returns the request's media type, lower-cased and without
// parameters; "" when the header is absent.
func mediaType(r *http.Request) (string, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "", nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fleet.Invalid(contentTypeField, "%q is not a valid media type", ct)
	}
	return mt, nil
}

func isJSON(mt string) bool { return mt == "application/json" || strings.HasSuffix(mt, "+json") }

// readBody reads the whole body, at most s.maxBody bytes.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return readBodyUpTo(w, r, s.maxBody)
}

// readBodyUpTo reads the whole body, at most limit bytes: over it is 413,
// a body that ends early 400.
func readBodyUpTo(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return nil, bodyReadError(err)
	}
	return body, nil
}

// bodyReadError is a failed read of a request body as the client is told:
// past the limit 413 (MaxBytesError) as it is, else 400: the client stopped
// sending mid-body, its fault, not ours.
func bodyReadError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return err
	}
	return fleet.Invalid("", "could not read the request body: %v", err)
}

// decodeBody decodes r's JSON body into dst strictly. With required unset an
// empty body leaves dst as it is.
func (s *server) decodeBody(w http.ResponseWriter, r *http.Request, dst any, required bool) error {
	body, err := s.readJSONBody(w, r)
	if err != nil {
		return err
	}
	return decodeStrict(body, dst, required)
}

// readJSONBody reads a body sent as JSON (or without a Content-Type).
func (s *server) readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	mt, err := mediaType(r)
	if err != nil {
		return nil, err
	}
	// No Content-Type is taken as JSON: curl without -H and minimal
	// clients send none, and the body is checked as JSON anyway.
	if mt != "" && !isJSON(mt) {
		return nil, fleet.Invalid(contentTypeField, "%s is not accepted here; send application/json", mt)
	}
	return s.readBody(w, r)
}

// decodeStrict decodes one JSON object into dst: unknown fields, repeated
// fields, wrong types and anything after the object are errors naming the
// field at fault (a repeated one by its JSON path).
func decodeStrict(body []byte, dst any, required bool) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		if required {
			return fleet.Invalid("", "a JSON object body is required")
		}
		return nil
	}
	if !utf8.Valid(body) {
		return fleet.Invalid("", "the body is not valid UTF-8")
	}
	if trimmed[0] != '{' {
		return fleet.Invalid("", "the body must be a JSON object")
	}
	// encoding/json keeps the last of repeated fields; a body saying two
	// things about one field is refused instead of being read one way here
	// and another way by a proxy or log reader.
	if err := checkRepeatedFields(trimmed); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err, dst)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fleet.Invalid("", "unexpected data after the JSON object")
	}
	return nil
}

// checkRepeatedFields rejects an object with a field twice, at any depth
// (nested objects, maps and the objects in lists), naming it by its path:
// usage.usd, forge.repos.r1, children[0].manifest. jsontext refuses
// duplicate names as it reads; its other syntax errors are left for the
// decoder, which reports them better.
func checkRepeatedFields(body []byte) error {
	err := jsontext.NewDecoder(bytes.NewReader(body)).SkipValue()
	var serr *jsontext.SyntacticError
	if !errors.As(err, &serr) || !errors.Is(serr.Err, jsontext.ErrDuplicateName) {
		return nil
	}
	var path strings.Builder
	for tok := range serr.JSONPointer.Tokens() {
		// The pointer does not say whether a number is an index or a
		// name; request bodies have no numeric field names.
		if _, err := strconv.Atoi(tok); err == nil {
			fmt.Fprintf(&path, "[%s]", tok)
			continue
		}
		if path.Len() > 0 {
			path.WriteByte('.')
		}
		path.WriteString(tok)
	}
	return fleet.Invalid(path.String(), "appears twice")
}

// unknownFieldPrefix starts encoding/json's error for a field dst lacks;
// the package has no typed error for it, so the name is parsed out.
const unknownFieldPrefix = "json: unknown field "

// jsonError turns a decoding error into a 400 naming the field.
func jsonError(err error, dst any) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fleet.Invalid("", "malformed JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fleet.Invalid("", "malformed JSON: the body ends early")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fleet.Invalid("", "the body must be a JSON object")
		}
		return fleet.Invalid(typ.Field, "must be %s, not %s", typeName(typ.Type), typ.Value)
	case strings.HasPrefix(err.Error(), unknownFieldPrefix):
		name, qerr := strconv.Unquote(strings.TrimPrefix(err.Error(), unknownFieldPrefix))
		if qerr != nil {
			name = strings.TrimPrefix(err.Error(), unknownFieldPrefix)
		}
		known := jsonFields(reflect.TypeOf(dst))
		if len(known) == 0 {
			return fleet.Invalid(name, "unknown field (this body takes no fields)")
		}
		return fleet.Invalid(name, "unknown field (accepted: %s)", strings.Join(known, ", "))
	}
	return fleet.Invalid("", "malformed JSON: %v", err)
}

// typeName says in words what JSON a Go type takes.
func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(typeName(t.Elem()), "a "), "an ") + "s"
	}
	return "an object"
}

// jsonFields lists the JSON names of a struct type's fields, in order.
func jsonFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			// An embedded struct's fields are the outer object's, as
			// encoding/json reads them.
			names = append(names, jsonFields(f.Type)...)
			continue
		}
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

// query checks the query string: only the parameters named in allowed, each
// at most once. A misspelt filter is refused, not silently ignored.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fleet.Invalid("", "malformed query string: %v", err)
	}
	for name, vs := range q {
		if !slices.Contains(allowed, name) {
			if len(allowed) == 0 {
				return nil, fleet.Invalid(name, "unknown query parameter (this route takes none)")
			}
			return nil, fleet.Invalid(name, "unknown query parameter (accepted: %s)", strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return nil, fleet.Invalid(name, "appears %d times", len(vs))
		}
	}
	return q, nil
}

// intParam reads an optional integer query parameter in [lo, hi].
func intParam(q url.Values, name string, def, lo, hi int64) (int64, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case (err != nil || v < lo) && hi == math.MaxInt64:
		return 0, fleet.Invalid(name, "%q is not an integer of at least %d", s, lo)
	case err != nil || v < lo || v > hi:
		return 0, fleet.Invalid(name, "%q is not an integer between %d and %d", s, lo, hi)
	}
	return v, nil
}

// pathName reads a path parameter that must be a plain name (ids are).
// Anything else cannot exist, and is refused before it reaches the store.
func pathName(r *http.Request, name string) (string, error) {
	v := r.PathValue(name)
	if err := fleet.ValidateName(name, v); err != nil {
		return "", err
	}
	return v, nil
}

// required reports a missing field.
func required(field, hint string) error {
	if hint != "" {
		return fleet.Invalid(field, "is required (%s)", hint)
	}
	return fleet.Invalid(field, "is required")
}

// prefersMinimal reports whether the request's Prefer headers (RFC 7240:
// comma-separated preferences, each name[=value] with ;parameters, names
// case-insensitive, values optionally quoted) ask for return=minimal; the
// first return preference counts (section 2). A preference is a hint:
// anything else in the header is ignored, never a 400.
func prefersMinimal(r *http.Request) bool {
	for _, h := range r.Header.Values(api.HeaderPrefer) {
		for pref := range strings.SplitSeq(h, ",") {
			pref, _, _ = strings.Cut(pref, ";")
			name, value, _ := strings.Cut(pref, "=")
			if strings.EqualFold(strings.TrimSpace(name), "return") {
				return strings.EqualFold(strings.Trim(strings.TrimSpace(value), `"`), "minimal")
			}
		}
	}
	return false
}
