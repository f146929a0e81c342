// Package dispatch is the `dispatch` function: a Cosmos DB change-feed
// trigger on the jobs container. For every changed job that is queued and
// not yet dispatched it runs the scheduler, stamps the target by CAS and
// publishes the dispatch message. The host checkpoints past a batch even
// when it fails (retries are best effort), so the redispatch sweep covers
// whatever a failed batch left behind.
package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/funchost"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Name is the function's folder name.
const Name = "dispatch"

// DocumentsBinding is the trigger's binding name in function.json.
const DocumentsBinding = "documents"

// Dispatcher is what the function needs of the coordinator.
type Dispatcher interface {
	DispatchChanged(ctx context.Context, items []store.Item) ([]coord.Decision, error)
}

// feedDoc holds the fields of a changed document the store needs to address
// it: its id, partition key and revision (Cosmos's _etag).
type feedDoc struct {
	ID        string `json:"id"`
	ProductID string `json:"productId"`
	ETag      string `json:"_etag"`
}

// Items turns a batch into store items.
func Items(raw json.RawMessage) ([]store.Item, error) {
	docs, err := funchost.DocumentFields(raw, "id", "productId", "_etag")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", funchost.ErrBadPayload, err)
	}
	items := make([]store.Item, 0, len(docs))
	for i, d := range docs {
		fd := feedDoc{ID: d.Fields[0], ProductID: d.Fields[1], ETag: d.Fields[2]}
		if !d.Exact {
			// The walk could not tell (a field that is not a string, a
			// name in another case): encoding/json's semantics on the v2
			// engine decide.
			fd = feedDoc{}
			if err := jsonv1.Unmarshal(d.Raw, &fd); err != nil {
				return nil, fmt.Errorf("%w: document %d: %v", funchost.ErrBadPayload, i, err)
			}
		}
		if fd.ID == "" || fd.ProductID == "" {
			return nil, fmt.Errorf("%w: document %d has no id or productId", funchost.ErrBadPayload, i)
		}
		items = append(items, store.Item{ID: fd.ID, PartitionKey: fd.ProductID, Rev: fd.ETag, Body: d.Raw})
	}
	return items, nil
}

// Func handles one batch.
func Func(d Dispatcher, log *slog.Logger) funchost.Func {
	return func(ctx context.Context, inv *funchost.Invocation) (*funchost.Result, error) {
		raw, ok := inv.Data[DocumentsBinding]
		if !ok {
			return nil, fmt.Errorf("%w: no %q in Data", funchost.ErrBadPayload, DocumentsBinding)
		}
		items, err := Items(raw)
		if err != nil {
			return nil, err
		}
		decisions, err := d.DispatchChanged(ctx, items)
		published := 0
		for _, dec := range decisions {
			if dec.Target != "" {
				published++
			}
		}
		if err != nil {
			return nil, fmt.Errorf("dispatch batch of %d: %d published: %w", len(items), published, err)
		}
		return &funchost.Result{
			Outputs:     map[string]any{},
			Logs:        []string{fmt.Sprintf("batch of %d, %d published", len(items), published)},
			ReturnValue: decisions,
		}, nil
	}
}
