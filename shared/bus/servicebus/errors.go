package servicebus

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/gigafactory/fleet/shared/bus"
)

// ErrUnauthorized: the identity lacks the role the operation needs (Data
// Sender to send, Data Receiver to receive, Data Owner for the management
// calls behind EnsureSubscription with Provision, DeleteSubscription and
// Depth).
var ErrUnauthorized = errors.New("servicebus: unauthorized")

// mapErr wraps err with the bus sentinel it stands for, keeping the SDK
// error in the chain (errors.As to *azservicebus.Error still works).
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if s := sentinel(err); s != nil {
		return fmt.Errorf("servicebus: %s: %w: %w", op, s, err)
	}
	return fmt.Errorf("servicebus: %s: %w", op, err)
}

func sentinel(err error) error {
	if sbErr := (*azservicebus.Error)(nil); errors.As(err, &sbErr) {
		switch sbErr.Code {
		case azservicebus.CodeLockLost:
			return bus.ErrLockLost
		case azservicebus.CodeNotFound:
			return bus.ErrNotFound
		case azservicebus.CodeClosed:
			return bus.ErrClosed
		case azservicebus.CodeUnauthorizedAccess:
			return ErrUnauthorized
		}
	}
	// The SDK passes a link attach refused with amqp:not-found (a topic or
	// subscription that does not exist) through unwrapped.
	if amqpErr := (*amqp.Error)(nil); errors.As(err, &amqpErr) {
		switch amqpErr.Condition {
		case amqp.ErrCondNotFound:
			return bus.ErrNotFound
		case amqp.ErrCondUnauthorizedAccess:
			return ErrUnauthorized
		}
	}
	if respErr := (*azcore.ResponseError)(nil); errors.As(err, &respErr) {
		switch respErr.StatusCode {
		case http.StatusNotFound:
			return bus.ErrNotFound
		case http.StatusUnauthorized, http.StatusForbidden:
			return ErrUnauthorized
		}
	}
	if errors.Is(err, azservicebus.ErrMessageTooLarge) {
		return bus.ErrInvalid
	}
	return nil
}

// isTimeout reports an SDK timeout: AcceptNextSession gives up with
// CodeTimeout when no session becomes available.
func isTimeout(err error) bool {
	sbErr := (*azservicebus.Error)(nil)
	return errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout
}
