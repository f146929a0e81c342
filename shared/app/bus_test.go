package app

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus"
	"github.com/gigafactory/fleet/shared/bus/servicebus"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/fleet"
)

// TestTransportImplementsCoordInterfaces: the coordinator finds GC requests
// and dead-letter recovery by interface; a transport missing either would
// switch them off silently.
func TestTransportImplementsCoordInterfaces(t *testing.T) {
	t.Parallel()
	var p coord.Publisher = &transport{}
	if _, ok := p.(coord.DeadLetterSource); !ok {
		t.Fatal("transport does not drain dead letters")
	}
	if _, ok := p.(coord.GCPublisher); !ok {
		t.Fatal("transport does not carry GC requests")
	}
	if _, ok := p.(coord.ControlPublisher); !ok {
		t.Fatal("transport does not carry cancel and preempt commands")
	}
}

// depthOnly is a busClient whose Depth answers from a table.
type depthOnly struct {
	busClient
	depth map[string]int64
	err   error
}

func (d depthOnly) Depth(_ context.Context, sub string) (int64, error) {
	if d.err != nil {
		return 0, d.err
	}
	n, ok := d.depth[sub]
	if !ok {
		return 0, bus.ErrNotFound
	}
	return n, nil
}

// In Azure the coordinator holds no Manage right (terraform/README.md), so
// depth is refused: /fleet/metrics says why instead of reporting an error on
// every scrape.
func TestDepthsWithoutManageRight(t *testing.T) {
	t.Parallel()
	factories := []*fleet.Factory{{ID: "linux"}, {ID: "mac-1"}}
	cases := []struct {
		name   string
		client depthOnly
		want   any
	}{
		{"counted", depthOnly{depth: map[string]int64{"linux": 3}},
			map[string]any{"subscriptionDepth": map[string]int64{"linux": 3}}},
		{"not granted", depthOnly{err: fmt.Errorf("depth of linux: %w", servicebus.ErrUnauthorized)},
			map[string]any{"subscriptionDepth": depthNotGranted}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := (&transport{client: tc.client}).depths(t.Context(), factories)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
