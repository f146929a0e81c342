package coord

import (
	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// ConflictError is a compare-and-swap that kept losing (kernel.CAS): clients
// get a 409 to retry.
type ConflictError = kernel.ConflictError

// The document kinds coord writes with kernel.CAS besides jobs.
var (
	factoryDocs = kernel.DocKind[fleet.Factory]{Name: "factory", Container: store.Factories, SetRev: func(f *fleet.Factory, r string) { f.Rev = r }}
	tokenDocs   = kernel.DocKind[fleet.Token]{Name: "token", Container: store.Tokens, SetRev: func(t *fleet.Token, r string) { t.Rev = r }}
	productDocs = kernel.DocKind[fleet.Product]{Name: "product", Container: store.Products, SetRev: func(p *fleet.Product, r string) { p.Rev = r }}
)
