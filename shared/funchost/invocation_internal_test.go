package funchost

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeInvocation: decodeInvocation decodes what encoding/json's
// Decoder decodes, to the same envelope, and refuses what it refuses.
func FuzzDecodeInvocation(f *testing.F) {
	for _, s := range []string{
		`{"Data":{"documents":"\"[{\\\"id\\\":\\\"a\\\"}]\""},"Metadata":{"sys":{"MethodName":"dispatch"}}}`,
		`{"Data":{},"Metadata":{}}`, `{}`, `{"data":{"x":1}}`, `{"Data":null}`, `{"Data":{"a":1},"Data":{"b":2}}`,
		`{"Data":{"a":1,"a":[2]}} trailing`, `{"Other":1,"Data":{"a":1}}`, `{"D\u0061ta":{"a":1}}`, `[1]`, `{"Data":{"a": 1 }}`,
		"{\"Data\":{\"\xff\":1}}", `{"Data":{"a":"\ud800"}}`, `{"Data":{"a":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want Invocation
		wantErr := json.NewDecoder(bytes.NewReader(body)).Decode(&want)
		got, err := decodeInvocation(body)
		if wantErr != nil {
			require.Error(t, err, "encoding/json refuses %q: %v", body, wantErr)
			return
		}
		require.NoError(t, err, "encoding/json takes %q", body)
		require.Equal(t, want, *got, "%q", body)
	})
}

// TestDecodeInvocationFastPath: the host's own shape takes the fast path,
// anything else goes to encoding/json.
func TestDecodeInvocationFastPath(t *testing.T) {
	t.Parallel()
	inv, ok := decodeHostShape([]byte(`{"Data":{"documents":"x"},"Metadata":{"sys":{"a":1}}}`))
	require.True(t, ok)
	require.Equal(t, Invocation{Data: map[string]json.RawMessage{"documents": json.RawMessage(`"x"`)},
		Metadata: map[string]json.RawMessage{"sys": json.RawMessage(`{"a":1}`)}}, *inv)
	_, ok = decodeHostShape([]byte(`{"data":{"documents":"x"}}`))
	require.False(t, ok, "a name in another case goes to encoding/json")
}

func BenchmarkDecodeInvocation(b *testing.B) {
	docs := []json.RawMessage{}
	for range 3 {
		docs = append(docs, json.RawMessage(`{"id":"j1","productId":"p","task":"`+string(bytes.Repeat([]byte(`do \"it\"\n`), 120))+`"}`))
	}
	body, err := json.Marshal(&Invocation{Data: map[string]json.RawMessage{"documents": EncodeDocuments(docs)}, Metadata: map[string]json.RawMessage{}})
	require.NoError(b, err)
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var inv Invocation
			require.NoError(b, json.NewDecoder(bytes.NewReader(body)).Decode(&inv))
		}
	})
	b.Run("decodeInvocation", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, err := decodeInvocation(body)
			require.NoError(b, err)
		}
	})
}
