package prune

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/funchost"
)

type fakePruner struct {
	n     int
	err   error
	calls int
}

func (p *fakePruner) Prune(context.Context) (int, error) {
	p.calls++
	return p.n, p.err
}

// invocation is a timer invocation the host would send, from the app's
// shared testdata.
func invocation(t *testing.T, file string) *funchost.Invocation {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", file))
	require.NoError(t, err)
	var inv funchost.Invocation
	require.NoError(t, json.Unmarshal(b, &inv))
	return &inv
}

// TestFunc: one tick runs one prune pass and reports how many factories
// it deregistered; a failed pass fails the invocation (the host logs it
// and the next tick tries again).
func TestFunc(t *testing.T) {
	t.Parallel()
	p := &fakePruner{n: 2}
	res, err := Func(p, nil)(t.Context(), invocation(t, "timer.json"))
	require.NoError(t, err)
	require.Equal(t, 1, p.calls)
	require.Equal(t, []string{"factories_pruned: 2"}, res.Logs)
	require.Equal(t, map[string]int{"factories_pruned": 2}, res.ReturnValue)

	p = &fakePruner{err: errors.New("store unavailable")}
	_, err = Func(p, nil)(t.Context(), invocation(t, "timer_past_due.json"))
	require.ErrorContains(t, err, "factories_pruned: store unavailable")
	require.Equal(t, 1, p.calls)
}
