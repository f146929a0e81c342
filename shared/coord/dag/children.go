package dag

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/coord/internal/kernel"
	"github.com/gigafactory/fleet/shared/store"

	"github.com/gigafactory/fleet/shared/fleet"
)

// A job's children (API.md, "DAG") are jobs posted to it: they run in its
// product, and the job waits for them in blocked, holding no seat. When
// every child has shipped it is queued again for its own step, or shipped
// at once when it is a composite job; a child that ends unshipped fails it
// with dependency_failed. Both happen from the child's own ending
// transition (settleParent); the redispatch sweep's UnblockReady only
// catches what a crash in between left.

// ChildrenRequest is a POST /fleet/jobs/{id}/children.
type ChildrenRequest struct {
	// Actor is fleet.ActorOperator or fleet.ActorFactory; ActorID names
	// the operator or the factory.
	Actor   fleet.Actor
	ActorID string
	// LeaseEpoch fences a holder factory (required); operators send none.
	LeaseEpoch *int64
	// Manifests are the children's manifests, in the request's order.
	Manifests [][]byte
}

// childSpec is one child of a request as parsed.
type childSpec struct {
	field string // children[i], for errors
	m     *fleet.Manifest
	id    string
	after []int // siblings it depends on
}

// PostChildren creates the children of job parentID (each idempotent by its
// idempotencyKey within the parent's, childKey; a child without one is keyed
// by its manifest) and makes the parent wait for them. A holder factory's parent gives its
// lease back. Every child is checked before any is written; created is
// false when every child already existed and the parent waits on each.
func (s *Service) PostChildren(ctx context.Context, productID, parentID string, req ChildrenRequest) (children []*fleet.Job, created bool, err error) {
	switch n := len(req.Manifests); {
	case n == 0:
		return nil, false, fleet.Invalid("children", "is required: at least one child manifest")
	case n > fleet.MaxChildrenPerRequest:
		return nil, false, fleet.Invalid("children", "has %d entries, at most %d allowed per request", n, fleet.MaxChildrenPerRequest)
	}
	parent, err := s.k.GetJob(ctx, productID, parentID)
	if err != nil {
		return nil, false, err
	}
	if err := kernel.CheckEpoch(req.Actor, req.LeaseEpoch); err != nil {
		return nil, false, err
	}
	specs, err := parseChildren(productID, parent.ID, req.Manifests)
	if err != nil {
		return nil, false, err
	}
	order, err := childOrder(specs)
	if err != nil {
		return nil, false, err
	}
	existing := make([]*fleet.Job, len(specs))
	known := 0
	for i, spec := range specs {
		j, err := s.k.GetJob(ctx, productID, spec.id)
		if errors.Is(err, fleet.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if j.ParentID != parent.ID {
			return nil, false, &fleet.Error{Code: fleet.CodeConflict, Field: spec.field + ".idempotencyKey",
				Message: fmt.Sprintf("idempotencyKey %q names job %s, which is not a child of %s", spec.m.IdempotencyKey, j.ID, parent.ID)}
		}
		existing[i] = j
		if slices.Contains(parent.Children, j.ID) {
			known++
		}
	}
	if known == len(specs) {
		// The same children again: nothing to write, whoever asks (a
		// holder retrying a post whose answer it lost no longer holds
		// the lease it posted under).
		return existing, false, nil
	}
	switch req.Actor {
	case fleet.ActorFactory:
		if err := parent.CheckFence(req.ActorID, *req.LeaseEpoch); err != nil {
			return nil, false, err
		}
	case fleet.ActorOperator:
		if err := operatorMayPostChildren(parent); err != nil {
			return nil, false, err
		}
	default:
		return nil, false, fmt.Errorf("post children: actor %q may not", req.Actor)
	}
	if depth := parent.Depth + 1; depth > fleet.MaxTreeDepth {
		return nil, false, fleet.Invalid("children", "would be at depth %d below their root, deeper than the limit of %d", depth, fleet.MaxTreeDepth)
	}
	root := rootOf(parent)
	fresh := 0
	pending := map[string]bool{}
	for i, spec := range specs {
		if existing[i] == nil {
			fresh++
			pending[spec.id] = true
		}
	}
	size, err := s.treeSize(ctx, productID, root)
	if err != nil {
		return nil, false, err
	}
	if size+fresh > fleet.MaxTreeJobs {
		return nil, false, fleet.Invalid("children", "the tree of %s holds %d jobs; %d more would pass the limit of %d", root, size, fresh, fleet.MaxTreeJobs)
	}
	if err := s.checkNoWaitCycle(ctx, parent, specs, existing, pending); err != nil {
		return nil, false, err
	}
	prepared := make([]*fleet.Job, len(specs))
	for _, i := range order {
		if existing[i] != nil {
			continue
		}
		if req.Actor == fleet.ActorFactory {
			if err := boundByParent(parent, specs[i]); err != nil {
				return nil, false, err
			}
		}
		j, err := s.lc.PrepareJob(ctx, productID, specs[i].id, specs[i].m, pending)
		if err != nil {
			return nil, false, withFieldPrefix(specs[i].field, err)
		}
		j.ParentID, j.RootID, j.Depth = parent.ID, root, parent.Depth+1
		prepared[i] = j
	}

	children = make([]*fleet.Job, len(specs))
	ids := make([]string, len(specs))
	for _, i := range order {
		j := existing[i]
		if j == nil {
			// A failure here leaves the children made so far in place,
			// the parent not yet waiting: the same request again (the
			// children are idempotent) completes it.
			if j, _, err = s.lc.CreateJob(ctx, prepared[i]); err != nil {
				return nil, false, err
			}
		}
		children[i], ids[i] = j, j.ID
	}
	created = fresh > 0
	after, err := s.lc.Move(ctx, childrenMove(parent, req, ids))
	if err != nil {
		return nil, false, err
	}
	// The children may have ended already (a re-post, a quick child): the
	// parent is settled now, not when the next one ends.
	s.SettleBlocked(context.WithoutCancel(ctx), after)
	return children, created, nil
}

// childrenMove records ids as parent's children and makes it wait for them:
// a holder's job gives its lease back, a queued one is blocked, a blocked
// one stays blocked.
func childrenMove(parent *fleet.Job, req ChildrenRequest, ids []string) Move {
	m := Move{ProductID: parent.ProductID, JobID: parent.ID, To: fleet.StageBlocked, Actor: req.Actor, ActorID: req.ActorID,
		Event: fleet.EventChildren, Message: fmt.Sprintf("waits for %d child(ren): %s", len(ids), strings.Join(ids, ", ")),
		Effect: func(j *fleet.Job) {
			for _, id := range ids {
				if !slices.Contains(j.Children, id) {
					j.Children = append(j.Children, id)
				}
			}
		}}
	if req.Actor == fleet.ActorFactory {
		m.Guard = func(j *fleet.Job) error { return j.CheckFence(req.ActorID, *req.LeaseEpoch) }
		return m
	}
	m.MayStay = true
	m.Guard = operatorMayPostChildren
	return m
}

// boundByParent holds a holder factory's child to its parent's gate and
// priority: the party under review cannot weaken its own gate (API.md) by
// posting its work as children and shipping them itself, nor jump its own
// job ahead of others' (or preempt their runs) the same way. A child
// without a gate takes the parent's; one with its own keeps every reviewer
// and the quorum of the parent's (403 naming children[i].review), and a
// composite child, which carries no gate, is refused under a gated parent.
// A priority above the parent's is lowered to it, not refused: a manifest
// without one says normal, so every child of a low job would be refused.
// An operator's children are the operator's to decide.
func boundByParent(parent *fleet.Job, spec childSpec) error {
	m := spec.m
	if p := parent.Priority; m.Priority.Rank() > p.Rank() {
		m.Priority = p
	}
	gate := parent.Review
	switch {
	case gate == nil:
		return nil
	case m.Kind == fleet.KindComposite:
		return &fleet.Error{Code: fleet.CodeForbidden, Field: spec.field + ".kind", Message: fmt.Sprintf(
			"a composite job carries no review gate, and its parent %s's holder may not post work its gate (%v, quorum %d) would not hold", parent.ID, gate.Reviewers, gate.Quorum)}
	case m.Review == nil:
		m.Review = &fleet.Review{Reviewers: slices.Clone(gate.Reviewers), Quorum: gate.Quorum, OnReject: gate.OnReject}
		return nil
	}
	missing := slices.DeleteFunc(slices.Clone(gate.Reviewers), func(rv string) bool { return slices.Contains(m.Review.Reviewers, rv) })
	if len(missing) > 0 || m.Review.Quorum < gate.Quorum {
		return &fleet.Error{Code: fleet.CodeForbidden, Field: spec.field + ".review", Message: fmt.Sprintf(
			"the parent %s is gated by %v with quorum %d: its holder's child keeps every one of those reviewers and at least that quorum (missing %v, quorum %d)",
			parent.ID, gate.Reviewers, gate.Quorum, missing, m.Review.Quorum)}
	}
	return nil
}

// operatorMayPostChildren: an operator gives children to a job no factory
// holds and that has not moved past the queue; the holder of a running job
// posts its own.
func operatorMayPostChildren(j *fleet.Job) error {
	if j.Stage == fleet.StageQueued || j.Stage == fleet.StageBlocked {
		return nil
	}
	return fleet.Errorf(fleet.CodeConflict, "job %s is %s: an operator posts children to a queued or blocked job (a running job's holder posts its own)", j.ID, j.Stage)
}

// parseChildren parses every manifest of a request and resolves the
// dependencies among the siblings: a dep naming another child's
// idempotencyKey is that child.
func parseChildren(productID, parentID string, manifests [][]byte) ([]childSpec, error) {
	specs := make([]childSpec, len(manifests))
	byKey := make(map[string]int, len(manifests))
	for i, raw := range manifests {
		field := fmt.Sprintf("children[%d]", i)
		m, err := fleet.ParseManifest(raw)
		if err != nil {
			return nil, withFieldPrefix(field, err)
		}
		if m.ParentID != "" && m.ParentID != parentID {
			return nil, fleet.Invalid(field+".parentId", "names %s, but a child's parent is the job it is posted to (%s)", m.ParentID, parentID)
		}
		m.ParentID = parentID
		key := m.IdempotencyKey
		if key == "" {
			// The same manifest posted again (a retried request, an
			// engine proposing it again) is the same child.
			sum := sha256.Sum256(raw)
			key = hex.EncodeToString(sum[:16])
			m.IdempotencyKey = childKey(parentID, key)
		}
		if prev, dup := byKey[m.IdempotencyKey]; dup {
			return nil, fleet.Invalid(field+".idempotencyKey", "is children[%d]'s too (identical manifests without a key are one child)", prev)
		}
		byKey[m.IdempotencyKey] = i
		specs[i] = childSpec{field: field, m: m, id: kernel.KeyedID(productID, childKey(parentID, key))}
	}
	for i := range specs {
		deps := make([]string, 0, len(specs[i].m.Deps))
		for d, dep := range specs[i].m.Deps {
			if j, ok := byKey[dep]; ok {
				if j == i {
					return nil, fleet.Invalid(fmt.Sprintf("%s.deps[%d]", specs[i].field, d), "a job cannot depend on itself")
				}
				dep = specs[j].id
				specs[i].after = append(specs[i].after, j)
			}
			if !slices.Contains(deps, dep) {
				deps = append(deps, dep)
			}
		}
		specs[i].m.Deps = deps
	}
	return specs, nil
}

// childKey is the key a child's id is made of: its idempotencyKey within
// its parent's. Scoped so, a holder cannot plant a job under a key an
// operator's submit or a tracker item will use (they would answer its job,
// its body and no gate), nor under another parent's child's.
func childKey(parentID, key string) string { return "child:" + parentID + ":" + key }

// FoundByKey answers a create (submit, tracker ingest, a child) whose
// idempotency key names job found already (err: reading it): found, unless
// it has another parent than parentID, the parent of the job being created
// ("" for a root). A root's key never answers a child, whatever the key.
func FoundByKey(found *fleet.Job, err error, parentID string) (*fleet.Job, bool, error) {
	if err != nil {
		return nil, false, err
	}
	if found.ParentID != parentID {
		what := "a root job"
		if found.ParentID != "" {
			what = "a child of " + found.ParentID
		}
		return nil, false, &fleet.Error{Code: fleet.CodeConflict, Field: "idempotencyKey",
			Message: fmt.Sprintf("idempotencyKey %q names job %s, %s; choose another key", found.IdempotencyKey, found.ID, what)}
	}
	return found, false, nil
}

// childOrder is an order in which every child comes after the siblings it
// depends on (they must exist when it is created); a cycle is refused.
func childOrder(specs []childSpec) ([]int, error) {
	order := make([]int, 0, len(specs))
	placed := make([]bool, len(specs))
	for len(order) < len(specs) {
		progress := false
		for i, s := range specs {
			if placed[i] || slices.ContainsFunc(s.after, func(j int) bool { return !placed[j] }) {
				continue
			}
			placed[i], progress = true, true
			order = append(order, i)
		}
		if !progress {
			for i := range specs {
				if !placed[i] {
					return nil, fleet.Invalid(specs[i].field+".deps", "the children's dependencies form a cycle")
				}
			}
		}
	}
	return order, nil
}

// withFieldPrefix returns err with its field under prefix (children[2].repo).
func withFieldPrefix(prefix string, err error) error {
	var fe *fleet.Error
	if !errors.As(err, &fe) {
		return err
	}
	out := *fe
	if out.Field == "" || out.Field == "manifest" {
		out.Field = prefix
	} else {
		out.Field = prefix + "." + out.Field
	}
	return &out
}

func rootOf(j *fleet.Job) string {
	if j.RootID != "" {
		return j.RootID
	}
	return j.ID
}

// treeSize counts the jobs of root's tree, root included.
func (s *Service) treeSize(ctx context.Context, productID, root string) (int, error) {
	items, err := s.k.QueryAll(ctx, store.Jobs, store.Query{PartitionKey: productID, Where: []store.Cond{store.Eq("rootId", root)}})
	if err != nil {
		return 0, err
	}
	return len(items) + 1, nil
}

// WaitState is where a blocked job's wait stands: its dependencies (by
// its depsMode) and its children (every one must ship) together.
func (s *Service) WaitState(ctx context.Context, j *fleet.Job, lookup Lookup) (Verdict, string, error) {
	v, why, err := s.depsState(ctx, j, lookup)
	if err != nil || v == Broken || len(j.Children) == 0 {
		return v, why, err
	}
	cv, cwhy, err := awaitVerdict(ctx, j.ProductID, j.Children, fleet.DepsAll, "child", lookup)
	if err != nil {
		return Waiting, "", err
	}
	if why == "" {
		why = cwhy
	}
	switch {
	case cv == Broken:
		return Broken, why, nil
	case cv == Ready && v == Ready:
		return Ready, "", nil
	}
	return Waiting, "", nil
}

// sameChildren refuses to move j on a verdict about its children when more
// were posted since it was read.
func sameChildren(read *fleet.Job) func(*fleet.Job) error {
	n := len(read.Children)
	return func(cur *fleet.Job) error {
		if len(cur.Children) != n {
			return fleet.Errorf(fleet.CodeConflict, "job %s was given more children", cur.ID)
		}
		return nil
	}
}

// settleParent settles the parent of ended, a child that just reached a
// terminal stage, if the parent waits for it.
func (s *Service) settleParent(ctx context.Context, ended *fleet.Job) {
	if ended.ParentID == "" {
		return
	}
	parent, err := s.k.GetJob(ctx, ended.ProductID, ended.ParentID)
	if err != nil {
		s.k.Log.ErrorContext(ctx, "settle parent: read it", "job", ended.ID, "parent", ended.ParentID, "err", err)
		return
	}
	if parent.Stage != fleet.StageBlocked || !slices.Contains(parent.Children, ended.ID) {
		return
	}
	s.settleBlockedBy(ctx, parent, func(ctx context.Context, productID, id string) (fleet.Stage, error) {
		if id == ended.ID {
			return ended.Stage, nil
		}
		return s.Stage(ctx, productID, id)
	})
}

// CancelDescendants cancels every non-terminal descendant of j (cancelled
// by operatorID). Among siblings, jobs others depend on go last, so a
// dependant is cancelled rather than failed for its cancelled dependency.
func (s *Service) CancelDescendants(ctx context.Context, operatorID string, j *fleet.Job, reason string) {
	kids := make([]*fleet.Job, 0, len(j.Children))
	for _, id := range j.Children {
		k, err := s.k.GetJob(ctx, j.ProductID, id)
		if err != nil {
			s.k.Log.ErrorContext(ctx, "cancel descendants: read child", "job", j.ID, "child", id, "err", err)
			continue
		}
		kids = append(kids, k)
	}
	why := fmt.Sprintf("cancelled with %s", j.ID)
	if reason != "" {
		why += ": " + reason
	}
	for _, k := range dependantsFirst(kids) {
		if !k.Stage.Terminal() {
			if _, err := s.lc.Cancel(ctx, operatorID, k.ProductID, k.ID, why); err == nil {
				continue // its own cancel took its descendants
			} else if !errors.Is(err, fleet.ErrConflict) {
				s.k.Log.ErrorContext(ctx, "cancel descendant", "job", k.ID, "err", err)
			}
		}
		// Ended (or ended meanwhile): its descendants may still run.
		s.CancelDescendants(ctx, operatorID, k, reason)
	}
}

// dependantsFirst orders siblings so that none comes before a sibling that
// depends on it.
func dependantsFirst(kids []*fleet.Job) []*fleet.Job {
	out := make([]*fleet.Job, 0, len(kids))
	left := slices.Clone(kids)
	for len(left) > 0 {
		next := slices.IndexFunc(left, func(k *fleet.Job) bool {
			return !slices.ContainsFunc(left, func(o *fleet.Job) bool { return slices.Contains(o.Deps, k.ID) })
		})
		if next < 0 {
			next = 0 // a cycle cannot be posted; take any
		}
		out = append(out, left[next])
		left = slices.Delete(left, next, next+1)
	}
	return out
}
