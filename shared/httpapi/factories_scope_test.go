package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestFactoriesShowOnlyTheCallersScope (issue 23 item 8): GET
// /fleet/factories, drain/undrain's answer and the product stream's factory
// changes show a product-scoped operator a factory shared with other
// products with only the caller's products and their repos (capabilities
// stay), and leave out a factory serving none of its products.
func TestFactoriesShowOnlyTheCallersScope(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.putProduct("p1", "r1")
	f.putProduct("other", "r2")
	shared := f.enroll("fs", []string{"p1", "other"}, "r1", "r2")
	f.enroll("fo", []string{"other"}, "r2")
	caps := []string{"os:linux", "engine:claude", "has:git"}

	type seen struct{ products, repos []string }
	list := func(token string) map[string]seen {
		t.Helper()
		var page api.List[fleet.Factory]
		f.ok(http.StatusOK, &page, "GET", "/api/fleet/factories", token, nil)
		out := map[string]seen{}
		for _, fc := range page.Items {
			require.Equal(t, caps, fc.Capabilities, "capabilities stay")
			out[fc.ID] = seen{fc.Products, fc.Repos}
		}
		return out
	}
	require.Equal(t, map[string]seen{"fs": {[]string{"p1"}, []string{"r1"}}}, list(p1Token))
	require.Equal(t, map[string]seen{"fs": {[]string{"other"}, []string{"r2"}}, "fo": {[]string{"other"}, []string{"r2"}}}, list(otherToken))
	require.Equal(t, map[string]seen{"fs": {[]string{"p1", "other"}, []string{"r1", "r2"}}, "fo": {[]string{"other"}, []string{"r2"}}}, list(multiToken))
	require.Equal(t, list(multiToken), list(rootToken))

	// A factory of other alone, with p1's repo checked out too: other's
	// operator manages it, and sees only other's repo.
	f.enroll("fo2", []string{"other"}, "r1", "r2")
	require.Equal(t, seen{[]string{"other"}, []string{"r2"}}, list(otherToken)["fo2"])
	for _, action := range []string{"drain", "undrain"} {
		var fc fleet.Factory
		f.ok(http.StatusOK, &fc, "POST", "/api/fleet/factories/fo2/"+action, otherToken, nil)
		require.Equal(t, []string{"r2"}, fc.Repos, action)
	}
	var whole fleet.Factory
	f.ok(http.StatusOK, &whole, "POST", "/api/fleet/factories/fo2/drain", rootToken, nil)
	require.Equal(t, []string{"r1", "r2"}, whole.Repos, "an unscoped operator sees it whole")
	f.ok(http.StatusOK, nil, "POST", "/api/fleet/factories/fo2/undrain", rootToken, nil)

	// The product stream, as its long poll: the shared factory's next
	// heartbeat is a change of p1's stream, shown as p1's operator sees it.
	type change struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	var page struct {
		Items    []change `json:"items"`
		Position string   `json:"position"`
	}
	f.ok(http.StatusOK, &page, "GET", "/api/fleet/events", p1Token, nil)
	f.ok(http.StatusOK, nil, "POST", "/api/fleet/factories/heartbeat", shared, map[string]any{
		"capabilities": caps, "repos": []string{"r1", "r2"}, "load": 1, "health": "ok",
	})
	f.ok(http.StatusOK, &page, "GET", "/api/fleet/events?after="+url.QueryEscape(page.Position), p1Token, nil)
	var factories int
	for _, ch := range page.Items {
		if ch.Type != "factory" {
			continue
		}
		factories++
		var fc fleet.Factory
		require.NoError(t, json.Unmarshal(ch.Data, &fc))
		require.Equal(t, "fs", fc.ID)
		require.Equal(t, []string{"p1"}, fc.Products, "the stream shows p1's operator only p1: %s", ch.Data)
		require.Equal(t, []string{"r1"}, fc.Repos)
		require.Equal(t, 1, fc.Load)
	}
	require.Positive(t, factories, "the heartbeat is a change of the stream: %+v", page.Items)

	// And live, on the stream itself.
	st := f.stream("/api/fleet/events/stream", p1Token)
	st.next() // its opening position
	f.ok(http.StatusOK, nil, "POST", "/api/fleet/factories/heartbeat", shared, map[string]any{
		"capabilities": caps, "repos": []string{"r1", "r2"}, "load": 2, "health": "ok",
	})
	blk, _ := st.nextEvent()
	require.Equal(t, "factory", blk.event)
	var fc fleet.Factory
	require.NoError(t, json.Unmarshal([]byte(blk.data), &fc))
	require.Equal(t, []string{"p1"}, fc.Products, "the live stream shows p1's operator only p1: %s", blk.data)
	require.Equal(t, []string{"r1"}, fc.Repos)
	require.Equal(t, 2, fc.Load)
}
