package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A campaign's proxy sees a few hundred requests while faults are on; at
// a 1 % rate a kind is then missed by chance in a few campaigns out of a
// hundred (one CI run injected no reset in 45 s). The first broken
// requests take every kind once, whatever the seed.
func TestProxyBreaksEveryKindFirst(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		p, err := newProxy("127.0.0.1:1", seed)
		require.NoError(t, err)
		p.setFaults(true)
		seen := map[verdict]int{}
		broken := 0
		for broken < 3 {
			v, d := p.decide()
			if v == pass {
				require.Zero(t, d)
				continue
			}
			require.Positive(t, d)
			seen[v]++
			broken++
		}
		p.close()
		require.Equal(t, map[verdict]int{drop: 1, slow: 1, reset: 1}, seen, "seed %d: the first three broken requests", seed)
	}
}

func TestProxyPassesWhileOff(t *testing.T) {
	t.Parallel()
	p, err := newProxy("127.0.0.1:1", 1)
	require.NoError(t, err)
	defer p.close()
	for range 1000 {
		v, _ := p.decide()
		require.Equal(t, pass, v)
	}
}
