package coord

import (
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
)

// ConflictError is a compare-and-swap that kept losing (kernel.CAS): clients
// get a 409 to retry.
type ConflictError = kernel.ConflictError
