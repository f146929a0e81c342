package app

import (
	"testing"

	"github.com/gigafactory/fleet/shared/coord"
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
}
