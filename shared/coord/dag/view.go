package dag

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/api/view"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/store"
)

// View is the tree of children a job belongs to, with the dependencies
// among (and out of) it (GET /fleet/jobs/{id}/dag).
type View = view.DAG

// Node is one job of a View.
type Node = view.DAGNode

// Edge kinds.
const (
	EdgeChild = view.EdgeChild
	EdgeDep   = view.EdgeDep
)

// Edge is one edge of a View.
type Edge = view.DAGEdge

// View returns the tree job id belongs to: its root, every job below it,
// and the jobs outside it that one of them depends on, with child and dep
// edges and a count per stage.
func (s *Service) View(ctx context.Context, productID, id string) (*View, error) {
	j, err := s.k.GetJob(ctx, productID, id)
	if err != nil {
		return nil, err
	}
	rootID := rootOf(j)
	root := j
	if rootID != j.ID {
		if root, err = s.k.GetJob(ctx, productID, rootID); err != nil {
			return nil, err
		}
	}
	members, _, err := s.k.ScanJobs(ctx, store.Query{PartitionKey: productID, Where: []store.Cond{store.Eq("rootId", rootID)}})
	if err != nil {
		return nil, err
	}
	jobs := append([]*fleet.Job{root}, members...)
	in := make(map[string]bool, len(jobs))
	for _, m := range jobs {
		in[m.ID] = true
	}
	for _, m := range slices.Clone(jobs) {
		for _, dep := range m.Deps {
			if in[dep] {
				continue
			}
			d, err := s.k.GetJob(ctx, productID, dep)
			if errors.Is(err, fleet.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			in[dep] = true
			jobs = append(jobs, d)
		}
	}
	// Siblings in the order they were posted (their parent's Children),
	// the rest by id: a stable order, and the one a tree is read in.
	pos := map[string]int{}
	for _, m := range jobs {
		for i, c := range m.Children {
			pos[c] = i
		}
	}
	slices.SortFunc(jobs, func(a, b *fleet.Job) int {
		return cmp.Or(strings.Compare(a.ParentID, b.ParentID), cmp.Compare(pos[a.ID], pos[b.ID]), strings.Compare(a.ID, b.ID))
	})
	d := &View{RootID: rootID, Nodes: make([]Node, 0, len(jobs)), Edges: []Edge{}, Counts: map[fleet.Stage]int{}}
	for _, m := range jobs {
		d.Nodes = append(d.Nodes, Node{ID: m.ID, Title: m.Title, Stage: m.Stage, Kind: m.Kind, ParentID: m.ParentID,
			Deps: m.Deps, DepsMode: m.DepsMode})
		d.Counts[m.Stage]++
		if m.ParentID != "" && in[m.ParentID] {
			d.Edges = append(d.Edges, Edge{From: m.ParentID, To: m.ID, Kind: EdgeChild})
		}
		for _, dep := range m.Deps {
			if in[dep] {
				d.Edges = append(d.Edges, Edge{From: dep, To: m.ID, Kind: EdgeDep})
			}
		}
	}
	return d, nil
}
