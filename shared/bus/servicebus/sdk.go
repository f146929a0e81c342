package servicebus

import (
	"context"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// The SDK's clients are concrete types; these are the slices of them this
// package uses, so unit tests run against fakes (the SDK's own advice: there
// is no Service Bus emulator on these machines and generic AMQP brokers do
// not speak its management protocol).

// sdkClient is the data-plane client.
type sdkClient interface {
	NewSender(topic string) (sdkSender, error)
	NewReceiverForSubscription(topic, sub string, deadLetters bool) (sdkReceiver, error)
	AcceptNextSessionForSubscription(ctx context.Context, topic, sub string) (sdkReceiver, error)
	Close(ctx context.Context) error
}

type sdkSender interface {
	SendMessage(ctx context.Context, m *azservicebus.Message, o *azservicebus.SendMessageOptions) error
	Close(ctx context.Context) error
}

// sdkReceiver is met by *azservicebus.Receiver and *azservicebus.SessionReceiver.
type sdkReceiver interface {
	ReceiveMessages(ctx context.Context, max int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.CompleteMessageOptions) error
	AbandonMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.AbandonMessageOptions) error
	DeadLetterMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.DeadLetterOptions) error
	Close(ctx context.Context) error
}

// sdkMessageLockRenewer is met by *azservicebus.Receiver: a message's own
// lock.
type sdkMessageLockRenewer interface {
	RenewMessageLock(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.RenewMessageLockOptions) error
}

// sdkSessionLockRenewer is met by *azservicebus.SessionReceiver: with
// sessions a message is locked by its session's lock.
type sdkSessionLockRenewer interface {
	RenewSessionLock(ctx context.Context, o *azservicebus.RenewSessionLockOptions) error
	LockedUntil() time.Time
}

// sdkAdmin is the management client (ATOM over HTTPS). *admin.Client meets
// it as is.
type sdkAdmin interface {
	GetTopic(ctx context.Context, topic string, o *admin.GetTopicOptions) (*admin.GetTopicResponse, error)
	GetSubscription(ctx context.Context, topic, sub string, o *admin.GetSubscriptionOptions) (*admin.GetSubscriptionResponse, error)
	CreateSubscription(ctx context.Context, topic, sub string, o *admin.CreateSubscriptionOptions) (admin.CreateSubscriptionResponse, error)
	DeleteSubscription(ctx context.Context, topic, sub string, o *admin.DeleteSubscriptionOptions) (admin.DeleteSubscriptionResponse, error)
	GetSubscriptionRuntimeProperties(ctx context.Context, topic, sub string, o *admin.GetSubscriptionRuntimePropertiesOptions) (*admin.GetSubscriptionRuntimePropertiesResponse, error)
}

var (
	_ sdkReceiver = (*azservicebus.Receiver)(nil)
	_ sdkReceiver = (*azservicebus.SessionReceiver)(nil)

	_ sdkMessageLockRenewer = (*azservicebus.Receiver)(nil)
	_ sdkSessionLockRenewer = (*azservicebus.SessionReceiver)(nil)
	_ sdkSender             = (*azservicebus.Sender)(nil)
	_ sdkAdmin              = (*admin.Client)(nil)
	_ sdkClient             = sdkAdapter{}
)

// sdkAdapter narrows *azservicebus.Client to sdkClient.
type sdkAdapter struct{ c *azservicebus.Client }

// The wrappers return untyped nils on error so a failed call never yields a
// non-nil interface holding a nil pointer.

func (a sdkAdapter) NewSender(topic string) (sdkSender, error) {
	s, err := a.c.NewSender(topic, nil)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (a sdkAdapter) NewReceiverForSubscription(topic, sub string, deadLetters bool) (sdkReceiver, error) {
	var o azservicebus.ReceiverOptions
	if deadLetters {
		o.SubQueue = azservicebus.SubQueueDeadLetter
	}
	r, err := a.c.NewReceiverForSubscription(topic, sub, &o)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (a sdkAdapter) AcceptNextSessionForSubscription(ctx context.Context, topic, sub string) (sdkReceiver, error) {
	r, err := a.c.AcceptNextSessionForSubscription(ctx, topic, sub, nil)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (a sdkAdapter) Close(ctx context.Context) error { return a.c.Close(ctx) }
