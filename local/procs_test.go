package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStackProcs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		procs    int
		env      string
		want     int
		wantSets bool
	}{
		{"one CPU keeps one", 1, "", 1, true},
		{"two CPUs give one each", 2, "", 1, true},
		{"odd counts round down", 5, "", 2, true},
		{"eight CPUs give four", 8, "", 4, true},
		{"the user's GOMAXPROCS is kept", 8, "8", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n, set := stackProcs(tc.procs, tc.env)
			require.Equal(t, tc.wantSets, set)
			require.Equal(t, tc.want, n)
		})
	}
}
