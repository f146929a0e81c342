package servicebus_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/bus/bustest"
	"github.com/gigafactory/fleet/shared/bus/servicebus"
)

// TestConformanceLive runs the bus conformance suite against a real
// namespace. It needs ServiceBus__fullyQualifiedNamespace, a topic
// (FLEET_SERVICEBUS_TOPIC, default fleet-dispatch) with duplicate detection
// on, and an identity with Data Owner on it (ServiceBus__clientId for a
// user-assigned managed identity, else DefaultAzureCredential): the suite
// creates uniquely named subscriptions and deletes them afterwards.
func TestConformanceLive(t *testing.T) {
	ns := os.Getenv("ServiceBus__fullyQualifiedNamespace")
	if ns == "" {
		t.Skip("ServiceBus__fullyQualifiedNamespace is not set: no Service Bus namespace to run the conformance suite against")
	}
	t.Parallel()
	for _, sessions := range []bool{false, true} {
		t.Run(fmt.Sprintf("sessions=%t", sessions), func(t *testing.T) {
			t.Parallel()
			bustest.Run(t, func(t *testing.T) bustest.Backend {
				c, err := servicebus.Open(t.Context(), servicebus.Options{
					Namespace: ns,
					ClientID:  os.Getenv("ServiceBus__clientId"),
					Topic:     os.Getenv("FLEET_SERVICEBUS_TOPIC"),
					Sessions:  sessions,
					Provision: true,
					// The shortest lock Service Bus allows keeps the
					// redelivery tests short.
					LockDuration:  5 * time.Second,
					MaxDeliveries: 3,
				})
				require.NoError(t, err)
				return c
			})
		})
	}
}
