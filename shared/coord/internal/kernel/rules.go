package kernel

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/gigafactory/fleet/shared/fleet"
)

// KeyedID is the id of the job with idempotencyKey key in productID: the
// key decides the id, so two racing submits collide on Create and both get
// the one job. Submit and a job's children both make ids this way.
func KeyedID(productID, key string) string {
	sum := sha256.Sum256([]byte(productID + "\x00" + key))
	return "k" + hex.EncodeToString(sum[:12])
}

// CheckEpoch: a holder factory acts under its leaseEpoch; an operator holds
// no lease and sends none (posting children, voting on a review).
func CheckEpoch(actor fleet.Actor, epoch *int64) error {
	switch {
	case actor == fleet.ActorFactory && epoch == nil:
		return fleet.Invalid("leaseEpoch", "is required: the leaseEpoch of the holder's claim")
	case actor == fleet.ActorOperator && epoch != nil:
		return fleet.Invalid("leaseEpoch", "is the holder factory's fence; an operator sends none")
	}
	return nil
}
