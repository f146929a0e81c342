package cosmos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// Documents as stored and as returned.
//
// Cosmos DB requires every document to carry its "id" and its partition-key
// field, and it adds system properties (_rid, _self, _etag, _attachments,
// _ts, and _lsn on the change feed). The Store contract is that Item.Body is
// what the caller wrote, so:
//
//   - on write, "id" and the partition-key field are checked against the id
//     and pk arguments (a mismatch is a caller bug and is refused, because
//     Cosmos would store or route the document under the body's value), and
//     added when absent; the names of added fields are recorded in
//     addedField so that reads can take them out again;
//   - on read, the system properties, the added fields and addedField are
//     removed, and the remaining members keep their order.
//
// A body therefore reads back equal as JSON to what was written (Cosmos
// re-serializes documents, so whitespace and number spelling may differ),
// while queries can still filter on id and the partition key.

// maxDocumentSize is Cosmos DB's limit on a stored document. Larger bodies
// are refused before a request, with a clearer message than the service's
// 413, as store.ErrTooLarge.
const maxDocumentSize = fleet.MaxDocumentBytes

// addedField lists the fields the store added to a body on write. It is
// reserved: a caller body containing it is refused.
const addedField = "_fleetAdded"

// systemFields are the properties Cosmos DB owns. They are dropped from
// bodies on write (Cosmos ignores or overwrites them anyway) and stripped on
// read; the revision comes from _etag before it is stripped.
var systemFields = map[string]bool{
	"_rid":         true,
	"_self":        true,
	"_etag":        true,
	"_attachments": true,
	"_ts":          true,
	"_lsn":         true,
}

// member is one top-level member of a JSON object, its value kept raw so
// nested content is copied byte for byte.
type member struct {
	key string
	raw json.RawMessage
}

// parseObject splits a JSON object into its top-level members, in order.
// Duplicate keys are refused: Cosmos and encoding/json would silently keep
// one of them, and which one differs.
func parseObject(b []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("body is not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("body is not a JSON object")
	}
	var ms []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("body is not JSON: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("body is not JSON: object key is not a string")
		}
		if seen[key] {
			return nil, fmt.Errorf("body has duplicate field %q", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("body field %q: %w", key, err)
		}
		ms = append(ms, member{key: key, raw: raw})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("body is not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("body has data after the JSON object")
	}
	return ms, nil
}

// encodeObject is the inverse of parseObject.
func encodeObject(ms []member) []byte {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(m.key) // marshalling a string cannot fail
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(m.raw)
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// stringValue returns the member's value if it is a JSON string.
func stringValue(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// validateID refuses ids Cosmos DB cannot address: item ids become URL path
// segments, so '/', '\\', '?' and '#' would address another resource.
func validateID(id string) error {
	if id == "" {
		return errors.New("id is empty")
	}
	if len(id) > 255 {
		return fmt.Errorf("id %.20q… is longer than 255 bytes", id)
	}
	if strings.ContainsAny(id, `/\?#`) {
		return fmt.Errorf("id %q contains one of / \\ ? #", id)
	}
	return nil
}

// prepareBody returns the document to send for a write of body under id and
// partition key pk, pkField being the container's top-level partition-key
// field.
func prepareBody(body []byte, id, pkField, pk string) ([]byte, error) {
	ms, err := parseObject(body)
	if err != nil {
		return nil, err
	}
	out := make([]member, 0, len(ms)+3)
	hasID, hasPK := false, false
	for _, m := range ms {
		switch {
		case systemFields[m.key]:
			continue
		case m.key == addedField:
			return nil, fmt.Errorf("body field %q is reserved by the store", addedField)
		case m.key == "id":
			v, ok := stringValue(m.raw)
			if !ok || v != id {
				return nil, fmt.Errorf("body id %s does not match id %q", m.raw, id)
			}
			hasID = true
		}
		if m.key == pkField && m.key != "id" {
			v, ok := stringValue(m.raw)
			if !ok || v != pk {
				return nil, fmt.Errorf("body %s %s does not match partition key %q", pkField, m.raw, pk)
			}
			hasPK = true
		}
		out = append(out, m)
	}
	if pkField == "id" {
		// The id is the partition key: both arguments name the same field.
		if id != pk {
			return nil, fmt.Errorf("container is partitioned on id: partition key %q must equal id %q", pk, id)
		}
		hasPK = true
	}
	var added []string
	if !hasID {
		raw, _ := json.Marshal(id)
		out = append(out, member{key: "id", raw: raw})
		added = append(added, "id")
	}
	if !hasPK {
		raw, _ := json.Marshal(pk)
		out = append(out, member{key: pkField, raw: raw})
		added = append(added, pkField)
	}
	if len(added) > 0 {
		raw, _ := json.Marshal(added)
		out = append(out, member{key: addedField, raw: raw})
	}
	doc := encodeObject(out)
	if len(doc) > maxDocumentSize {
		return nil, fmt.Errorf("document is %d bytes, over Cosmos DB's limit of %d: %w", len(doc), maxDocumentSize, store.ErrTooLarge)
	}
	return doc, nil
}

// storedDoc is a document as Cosmos returned it, taken apart.
type storedDoc struct {
	id   string
	pk   string
	etag string
	body []byte // without system properties and added fields
}

// decodeDoc takes a document returned by Cosmos apart: its id, the value of
// pkField, its _etag, and the body the caller wrote.
func decodeDoc(raw []byte, pkField string) (storedDoc, error) {
	ms, err := parseObject(raw)
	if err != nil {
		return storedDoc{}, err
	}
	var d storedDoc
	drop := map[string]bool{}
	for _, m := range ms {
		if m.key == addedField {
			var added []string
			if err := json.Unmarshal(m.raw, &added); err != nil {
				return storedDoc{}, fmt.Errorf("document field %s: %w", addedField, err)
			}
			for _, k := range added {
				drop[k] = true
			}
		}
	}
	out := make([]member, 0, len(ms))
	for _, m := range ms {
		switch m.key {
		case "id":
			d.id, _ = stringValue(m.raw)
		case "_etag":
			d.etag, _ = stringValue(m.raw)
		}
		if m.key == pkField {
			d.pk, _ = stringValue(m.raw)
		}
		if systemFields[m.key] || m.key == addedField || drop[m.key] {
			continue
		}
		out = append(out, m)
	}
	d.body = encodeObject(out)
	return d, nil
}

// intField reads a top-level integer field of a document, as written by a
// Cosmos patch increment.
func intField(raw []byte, field string) (int64, error) {
	ms, err := parseObject(raw)
	if err != nil {
		return 0, err
	}
	for _, m := range ms {
		if m.key != field {
			continue
		}
		s := string(m.raw)
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
		// Cosmos stores numbers as IEEE doubles and may spell an integral
		// value with an exponent or a fraction.
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, fmt.Errorf("field %q is %s, not an integer", field, m.raw)
		}
		return int64(f), nil
	}
	return 0, fmt.Errorf("field %q is absent from the patched document", field)
}
