package nats

import (
	"fmt"

	natsgo "github.com/nats-io/nats.go"
)

// What a factory may do on the broker. A server that authenticates its
// clients (the local stack's, natsserver.Options.Auth) gives a factory's
// connection exactly FactoryPermissions of its own subscription: it can
// create and read its own consumer and settle what that consumer delivers,
// and nothing else. It cannot read another factory's subject or consumer,
// cannot publish a dispatch, GC or control message (a forged cancel), and
// cannot create, update or read the streams; the coordinator does that.

// factoryInboxRoot starts every factory's reply subjects. Replies to a
// pull request carry the pulled messages, so a factory may subscribe to
// its own replies only, never to the shared _INBOX.> where every other
// connection's replies (the coordinator's included) pass.
const factoryInboxRoot = "_FLEET_INBOX"

// jsAPI is the JetStream API subject prefix (no domain).
const jsAPI = "$JS.API."

// FactoryInbox is the reply-subject prefix of the connections that read
// subscription sub.
func FactoryInbox(sub string) string { return factoryInboxRoot + "." + token(sub) }

// FactoryConnOptions are the connection options of a factory reading sub:
// its fleet token as the NATS token (the server resolves it as the API
// does, so a factory needs no second secret) and its own reply prefix.
// A server that requires no credentials ignores the token.
func FactoryConnOptions(sub, fleetToken string) []natsgo.Option {
	return []natsgo.Option{natsgo.Token(fleetToken), natsgo.CustomInboxPrefix(FactoryInbox(sub))}
}

// Permissions name the subjects a connection may publish and subscribe to
// (NATS subject patterns; anything not listed is refused).
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// FactoryPermissions are the subjects a factory or pool reading sub needs
// with a Bind client of options o: create its own consumers (the create
// subject names the filter, and the server checks the consumer's filter
// against it, so the consumer can only read sub's subject), read and pull
// from its dispatch consumer, settle its deliveries, and dead-letter them
// to its own dead-letter subject (the client enforces MaxDeliver, see the
// package doc). It never receives its dead letters: the coordinator drains
// them.
func FactoryPermissions(o Options, sub string) (Permissions, error) {
	if err := o.defaults(); err != nil {
		return Permissions{}, err
	}
	tok := token(sub)
	c := Client{opts: o}
	return Permissions{
		Publish: []string{
			jsAPI + "CONSUMER.CREATE." + o.Stream + "." + tok + "." + c.subject("dispatch", sub),
			jsAPI + "CONSUMER.CREATE." + o.DeadLetterStream + "." + tok + "." + c.subject("dlq", sub),
			jsAPI + "CONSUMER.INFO." + o.Stream + "." + tok,
			jsAPI + "CONSUMER.MSG.NEXT." + o.Stream + "." + tok,
			// $JS.ACK.<stream>.<consumer>.<delivery metadata...>
			"$JS.ACK." + o.Stream + "." + tok + ".>",
			c.subject("dlq", sub),
		},
		Subscribe: []string{FactoryInbox(sub) + ".>"},
	}, nil
}

// String lists the permissions for a log line.
func (p Permissions) String() string {
	return fmt.Sprintf("publish %v, subscribe %v", p.Publish, p.Subscribe)
}
