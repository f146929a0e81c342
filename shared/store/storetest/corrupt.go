package storetest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
)

// Continuations are opaque to the suite, but clients hand them back, so a
// backend must survive one altered inside as well as plain garbage. When a
// continuation is base64 of JSON (as Cosmos's are), corrupted takes it apart
// and changes one thing at a time inside, JSON nested in its strings too,
// then puts it back together; for anything else it only truncates and flips
// bytes.

// corrupted returns named variants of cont: truncations, flipped bytes of
// the decoded form, every leaf replaced by garbage, and every leaf replaced
// by the same leaf of other (a continuation the backend issued elsewhere).
func corrupted(cont, other string) map[string]string {
	out := map[string]string{}
	add := func(name, v string) {
		if v != "" && v != cont {
			out[name] = v
		}
	}
	for _, n := range []int{1, len(cont) / 2, len(cont) - 1} {
		if n > 0 && n < len(cont) {
			add(fmt.Sprintf("truncated to %d", n), cont[:n])
		}
	}
	raw, enc, ok := decodeB64(cont)
	if !ok {
		b := []byte(cont)
		for i := range b {
			c := append([]byte(nil), b...)
			c[i] ^= 0x01
			add(fmt.Sprintf("byte %d flipped", i), string(c))
		}
		return out
	}
	// Flip bytes of the decoded form at a few places spread over it.
	for i := 0; i < len(raw); i += max(1, len(raw)/16) {
		c := append([]byte(nil), raw...)
		c[i] ^= 0x01
		add(fmt.Sprintf("decoded byte %d flipped", i), enc.EncodeToString(c))
	}
	add("decoded truncated", enc.EncodeToString(raw[:len(raw)/2]))
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return out
	}
	var o any
	if ob, _, ok := decodeB64(other); ok {
		_ = json.Unmarshal(ob, &o)
	}
	for path, nv := range mutations(v, o, "") {
		b, err := json.Marshal(nv)
		if err == nil {
			add(path, enc.EncodeToString(b))
		}
	}
	return out
}

func decodeB64(s string) ([]byte, *base64.Encoding, bool) {
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.StdEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) > 0 {
			return b, enc, true
		}
	}
	return nil, nil, false
}

// mutations returns copies of v with one leaf changed, keyed by what was
// changed. other is the value at the same place in another continuation
// (nil when it has none). A string that holds JSON is changed inside too.
func mutations(v, other any, path string) map[string]any {
	out := map[string]any{}
	switch x := v.(type) {
	case map[string]any:
		om, _ := other.(map[string]any)
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			for p, nv := range mutations(x[k], om[k], path+"."+k) {
				c := make(map[string]any, len(x))
				for kk, vv := range x {
					c[kk] = vv
				}
				c[k] = nv
				out[p] = c
			}
		}
	case []any:
		oa, _ := other.([]any)
		for i := range x {
			var oi any
			if i < len(oa) {
				oi = oa[i]
			}
			for p, nv := range mutations(x[i], oi, fmt.Sprintf("%s[%d]", path, i)) {
				c := append([]any(nil), x...)
				c[i] = nv
				out[p] = c
			}
		}
		// Ranges repeated make a request per copy on a backend that reads
		// one per listed range.
		out[path+" repeated"] = append(append([]any(nil), x...), x...)
	case string:
		out[path+" garbage"] = "garbage"
		out[path+" truncated"] = x[:len(x)/2]
		if x != "" {
			b := []byte(x)
			b[len(b)-1] ^= 0x01
			out[path+" last byte flipped"] = string(b)
		}
		var inner any
		if json.Unmarshal([]byte(x), &inner) == nil {
			if _, ok := inner.(string); !ok {
				var oinner any
				if os, ok := other.(string); ok {
					_ = json.Unmarshal([]byte(os), &oinner)
				}
				for p, nv := range mutations(inner, oinner, path+">") {
					b, err := json.Marshal(nv)
					if err == nil {
						out[p] = string(b)
					}
				}
			}
		}
	case float64:
		out[path+" negative"] = -1 - x
		out[path+" huge"] = x + 1e9
	case bool:
		out[path+" negated"] = !x
	}
	if other != nil && fmt.Sprint(other) != fmt.Sprint(v) {
		out[path+" from the other"] = other
	}
	return out
}
