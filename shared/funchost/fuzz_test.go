package funchost_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/funchost"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzInvocation posts any body to the custom handler as an invocation of
// an HTTP, a timer and a change-feed function: the handler never panics and
// always answers the host a JSON envelope (200, or 500 for a payload it
// cannot decode, which the host records as a failed invocation), and a
// change-feed batch it decodes re-encodes to the same documents.
func FuzzInvocation(f *testing.F) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(f, err)
	for _, name := range files {
		b, err := os.ReadFile(name)
		require.NoError(f, err)
		for fn := range 3 {
			f.Add(uint8(fn), b)
		}
	}
	f.Add(uint8(2), []byte(`{"Data":{"docs":"\"[{\\\"id\\\":\\\"a\\\"}]\""}}`))
	f.Add(uint8(0), []byte(`{"Data":{"req":"{\"Url\":\"http://h/api/x\",\"Method\":\"get\"}"}}`))

	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", r.URL.Path)
		_, _ = w.Write(b)
	})
	var batch []json.RawMessage
	srv := funchost.NewServer(nil, "", nil)
	srv.Handle("http", funchost.HTTPFunc(echo, "req", "res"))
	srv.Handle("timer", funchost.TimerFunc("timer", "tick", nil, func(context.Context) (int, error) { return 0, nil }))
	srv.Handle("feed", func(_ context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		docs, err := funchost.Documents(inv.Data["docs"])
		batch = docs
		return nil, err
	})
	names := []string{"http", "timer", "feed"}

	f.Fuzz(func(t *testing.T, fn uint8, body []byte) {
		batch = nil
		name := names[int(fn)%len(names)]
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+name, strings.NewReader(string(body))))
		require.Contains(t, []int{http.StatusOK, http.StatusInternalServerError}, rec.Code, "%s", rec.Body)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		var res funchost.Result
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &res), "not an envelope: %s", rec.Body)
		require.NotNil(t, res.Outputs)
		require.NotNil(t, res.Logs)
		if name == "feed" && rec.Code == http.StatusOK && batch != nil {
			again, err := funchost.Documents(funchost.EncodeDocuments(batch))
			require.NoError(t, err)
			require.Len(t, again, len(batch))
			for i := range batch {
				require.JSONEq(t, string(batch[i]), string(again[i]))
			}
		}
	})
}

// documentsV1 is Documents as it was with encoding/json alone: the
// reference its faster form must agree with.
func documentsV1(raw json.RawMessage) ([]json.RawMessage, error) {
	inner, err := funchost.Unwrap(raw)
	if err != nil {
		return nil, err
	}
	if len(inner) == 0 || string(inner) == "null" {
		return nil, nil
	}
	var docs []json.RawMessage
	if err := json.Unmarshal(inner, &docs); err != nil {
		return nil, err
	}
	return docs, nil
}

// FuzzDocuments: Documents takes exactly the batches encoding/json takes,
// and finds the same documents in them.
func FuzzDocuments(f *testing.F) {
	for _, s := range []string{
		`"\"[{\\\"id\\\":\\\"a\\\"},{\\\"id\\\":\\\"b\\\",\\\"id\\\":\\\"c\\\"}]\""`, `[1, "two", {"x": [null]}]`,
		`""`, `"null"`, `null`, `"not json"`, `[1] [2]`, `[1,]`, `"[\"\\ud800\"]"`, "[\"\xff\"]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, wantErr := documentsV1(raw)
		got, err := funchost.Documents(raw)
		if wantErr != nil {
			require.Error(t, err, "encoding/json refuses %q: %v", raw, wantErr)
			return
		}
		require.NoError(t, err, "encoding/json takes %q", raw)
		require.Len(t, got, len(want))
		for i := range want {
			// The same bytes: each is the value as it stands in the
			// batch (JSONEq would choke on a number past float64).
			require.Equal(t, string(want[i]), string(got[i]))
		}
	})
}

// encodeDocumentsTwoPass is EncodeDocuments as it was, quoting the array
// and then the quoted array with jsontext: the reference the one-pass
// BatchWriter must agree with byte for byte.
func encodeDocumentsTwoPass(docs []json.RawMessage) []byte {
	arr := []byte{'['}
	for i, d := range docs {
		if i > 0 {
			arr = append(arr, ',')
		}
		arr = append(arr, d...)
	}
	arr = append(arr, ']')
	once, _ := jsontext.AppendQuote(nil, arr)
	twice, _ := jsontext.AppendQuote(nil, once)
	return twice
}

// FuzzEncodeDocuments: the one-pass encoding of any documents, split into
// any parts, is the two rounds of jsontext quoting byte for byte, whatever
// the bytes (quotes, backslashes, control characters, invalid UTF-8).
func FuzzEncodeDocuments(f *testing.F) {
	f.Add([]byte(`{"id":"a","t":"x \"y\" \\ z\n\t\u0001"}`), uint8(7), uint8(3))
	f.Add([]byte("{\"b\":\"\xff\xfe\xed\xa0\x80 \u2028 \ufffd \x7f \x1f \x00\"}"), uint8(5), uint8(2))
	f.Add([]byte("\xe2\x82"), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, src []byte, cut, docs uint8) {
		// src cut into up to docs documents, each written in two parts.
		n := int(docs%4) + 1
		var batch []json.RawMessage
		var w funchost.BatchWriter
		w.Begin([]byte("prefix:"))
		for i := range n {
			d := src[i*len(src)/n : (i+1)*len(src)/n]
			batch = append(batch, d)
			k := 0
			if len(d) > 0 {
				k = int(cut) % (len(d) + 1)
			}
			// Add's parts are split before a byte that starts a character.
			for k > 0 && k < len(d) && !utf8.RuneStart(d[k]) {
				k--
			}
			w.Add(d[:k], d[k:])
		}
		want := encodeDocumentsTwoPass(batch)
		require.Equal(t, "prefix:"+string(want), string(w.End()))
		require.Equal(t, string(want), string(funchost.EncodeDocuments(batch)))
	})
}

// FuzzDocumentFields: DocumentFields takes exactly the batches encoding/json
// takes and finds the same documents, and where it says its fields are
// exact they are what encoding/json decodes from the document.
func FuzzDocumentFields(f *testing.F) {
	for _, s := range []string{
		`"\"[{\\\"id\\\":\\\"a\\\",\\\"productId\\\":\\\"p\\\",\\\"_etag\\\":\\\"\\\\\\\"1\\\\\\\"\\\"}]\""`,
		`[{"id":"a","ID":"b"}]`, `[{"Id":"a"}]`, `[{"id":null,"productId":"p"}]`, `[{"id":7}]`, `[{"id":"a","id":"b"}]`,
		`[{"ıd":"a"}]`, `[{"_ETAG":"x"}]`, `[ 7 , {"id":"a"} ,"s"]`, `[{"id":"a\ud800"}]`, "[{\"id\":\"\xff\"}]",
		`[{"x":{"id":"nested"},"id":"top"}]`, `[{"id":"a"}] [2]`, `[{"id":"a",}]`, `[]`, `null`, `""`, `"null"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, wantErr := documentsV1(raw)
		got, err := funchost.DocumentFields(raw, "id", "productId", "_etag")
		if wantErr != nil {
			require.Error(t, err, "encoding/json refuses %q: %v", raw, wantErr)
			return
		}
		require.NoError(t, err, "encoding/json takes %q", raw)
		require.Len(t, got, len(want))
		for i, d := range got {
			require.Equal(t, string(want[i]), string(d.Raw))
			if !d.Exact {
				continue
			}
			var v struct {
				ID        string `json:"id"`
				ProductID string `json:"productId"`
				ETag      string `json:"_etag"`
			}
			require.NoError(t, json.Unmarshal(d.Raw, &v), "exact, so encoding/json decodes %q", d.Raw)
			require.Equal(t, []string{v.ID, v.ProductID, v.ETag}, d.Fields, "%q", d.Raw)
		}
	})
}
