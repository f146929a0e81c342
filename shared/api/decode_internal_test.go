package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/internal/fill"
)

// TestAnswersDecodeAsEncodingJSON: the client decodes every answer type,
// each with every field set, to the value encoding/json decodes, and
// decodes as encoding/json does the shapes a server may send that the
// struct does not spell exactly (names in another case, unknown fields,
// null, a duplicate name).
func TestAnswersDecodeAsEncodingJSON(t *testing.T) {
	t.Parallel()
	answers := []any{
		&fleet.Job{}, &Claimed{}, &Budget{}, &fleet.Product{}, &fleet.Artifact{}, &Renewal{}, &Metrics{},
		&LogAppended{}, &List[fleet.Run]{}, &List[fleet.Event]{}, &List[*fleet.Job]{}, &List[*fleet.Factory]{},
		&JobPage{}, &Explanation{}, &EnrollResponse{}, &fleet.Factory{}, &ErrorBody{},
	}
	for _, a := range answers {
		typ := reflect.TypeOf(a).Elem()
		t.Run(typ.String(), func(t *testing.T) {
			t.Parallel()
			fill.Value(reflect.ValueOf(a).Elem())
			body, err := json.Marshal(a)
			require.NoError(t, err)
			want, got := reflect.New(typ).Interface(), reflect.New(typ).Interface()
			require.NoError(t, json.Unmarshal(body, want))
			require.NoError(t, jsonUnmarshal(body, got))
			require.Equal(t, want, got)
		})
	}
	for _, body := range []string{
		`{"ID":"j1","PRODUCTID":"p1","stage":"queued"}`,
		`{"id":"j1","unknown":{"deep":[1,2,3]},"stage":null}`,
		`{"id":"j1","id":"j2"}`,
		`{"id":"j1","labels":null,"title":"\u00e9 \ud83d\ude00"}`,
	} {
		t.Run(fmt.Sprintf("job %s", body), func(t *testing.T) {
			t.Parallel()
			var want, got fleet.Job
			require.NoError(t, json.Unmarshal([]byte(body), &want))
			require.NoError(t, jsonUnmarshal([]byte(body), &got))
			require.Equal(t, want, got)
		})
	}
}
