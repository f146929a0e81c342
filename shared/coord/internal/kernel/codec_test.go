package kernel

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/internal/fill"
)

// TestCodecIsEncodingJSON: the codec the CAS writes jobs with writes the
// bytes an encoding/json Encoder without HTML escaping writes ('<' as
// itself: fleet.EncodedLen counts on it), and reads them back to what
// encoding/json reads, for a job with every field set.
func TestCodecIsEncodingJSON(t *testing.T) {
	t.Parallel()
	var j fleet.Job
	fill.Value(reflect.ValueOf(&j).Elem())
	j.Body = "<a href='x'>&amp;</a> \"q\" \\ \t\n\r\x01\x1f\u2028\u2029\u00e9"
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(&j))
	want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	got, err := marshal(&j)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))

	var a, b fleet.Job
	require.NoError(t, json.Unmarshal(want, &a))
	require.NoError(t, unmarshal(want, &b))
	require.Equal(t, a, b)
	require.Greater(t, len(want), 2000, "the filled job sets its fields: %s", want)
}
