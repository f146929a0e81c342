package sqlite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/gigafactory/fleet/shared/store"
	"github.com/stretchr/testify/require"
)

// checkBodyV1 is checkBody as it was, on encoding/json's token decoder: the
// reference the faster form must agree with.
func checkBodyV1(t *table, pk, id string, body []byte) error {
	if len(body) > MaxBodyBytes {
		return fmt.Errorf("body is %d bytes, more than %d: %w", len(body), MaxBodyBytes, store.ErrTooLarge)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("body is not a JSON object")
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("body is not JSON: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return errors.New("body is not JSON: object key is not a string")
		}
		if seen[key] {
			return fmt.Errorf("body has duplicate field %q", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("body field %q: %w", key, err)
		}
		want, address := "", false
		switch key {
		case "id":
			want, address = id, true
		case t.pkField:
			want, address = pk, true
		}
		if address {
			var got string
			if raw[0] != '"' || json.Unmarshal(raw, &got) != nil || got != want {
				return fmt.Errorf("body field %q is %s, want the string %q it is written under", key, raw, want)
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return fmt.Errorf("body is not JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("body has data after the JSON object")
	}
	if t.pkField == "id" && pk != id {
		return fmt.Errorf("container is partitioned on id: partition key %q must equal id %q", pk, id)
	}
	return nil
}

// FuzzCheckBody: checkBody refuses exactly the bodies its encoding/json
// form refused (kept above as the reference), for the jobs container
// (partitioned on productId) and the products one (on id).
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"j1","productId":"p1","n":1}`, `{"id":"j1","productId":"p1","n":1,"n":2}`, `{"id":"j1","productId":"p1","x":{"a":1,"a":2}}`,
		`{"id":1,"productId":"p1"}`, `{"id":"j1","productId":"p2"}`, `{"id":"j\u0031","productId":"p1"}`, `{"id":"j1",`,
		`[{"id":"j1"}]`, `{"id":"j1","productId":"p1"} {}`, "{\"id\":\"j1\",\"productId\":\"p1\",\"s\":\"\xff\"}", ``, ` {"id":"j1"} `,
	} {
		f.Add([]byte(s))
	}
	tables := []*table{{name: store.Jobs, pkField: "productId"}, {name: store.Products, pkField: "id"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tb := range tables {
			for _, addr := range [][2]string{{"p1", "j1"}, {"j1", "j1"}} {
				want := checkBodyV1(tb, addr[0], addr[1], body)
				got := checkBody(tb, addr[0], addr[1], body)
				require.Equal(t, want == nil, got == nil, "%s %v %q: encoding/json form says %v, checkBody %v", tb.name, addr, body, want, got)
			}
		}
	})
}

func BenchmarkCheckBody(b *testing.B) {
	tb := &table{name: store.Jobs, pkField: "productId"}
	body := fmt.Appendf(nil, `{"id":"j1","productId":"p1","stage":"queued","title":"a \"job\"","task":%q,"deps":[],"budget":{"usd":1.5},"recentEvents":[{"seq":1,"message":"created"},{"seq":2,"message":"routed"}]}`,
		strings.Repeat("do the thing\n", 90))
	for _, c := range []struct {
		name  string
		check func(*table, string, string, []byte) error
	}{{"encoding/json", checkBodyV1}, {"jsontext", checkBody}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.check(tb, "p1", "j1", body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
