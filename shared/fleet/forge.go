package fleet

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ForgeKind names a code forge a product's pull requests live on.
type ForgeKind string

// ForgeGitHub is GitHub (github.com or GitHub Enterprise Server).
const ForgeGitHub ForgeKind = "github"

// ForgeKinds lists every forge kind.
func ForgeKinds() []ForgeKind { return []ForgeKind{ForgeGitHub} }

// MergeMethod is how a pull request is merged.
type MergeMethod string

const (
	MergeCommit MergeMethod = "merge"
	MergeSquash MergeMethod = "squash"
	MergeRebase MergeMethod = "rebase"
)

// MergeMethods lists every merge method.
func MergeMethods() []MergeMethod { return []MergeMethod{MergeCommit, MergeSquash, MergeRebase} }

// Forge defaults and bounds (API.md "Pull requests").
const (
	DefaultMaxIterations = 3
	MaxMaxIterations     = 20
	// MaxFeedback bounds the feedback a job keeps (the newest); each
	// item's body is cut to MaxFeedbackBody.
	MaxFeedback     = 20
	MaxFeedbackBody = 8 << 10
	// MaxRequiredChecks bounds forge.requiredChecks, and MaxCheckNameLen
	// each name in it: a check run's name or a status's context.
	MaxRequiredChecks = 50
	MaxCheckNameLen   = 200
)

// ForgeConfig is a product's forge: where its delivered jobs become pull
// requests (PUT /fleet/products/{id} {forge}).
type ForgeConfig struct {
	Kind ForgeKind `json:"kind"`
	// Repos maps a repo the product owns to its repository on the forge,
	// "owner/name".
	Repos map[string]string `json:"repos"`
	// BaseBranch is what pull requests merge into; "" is the repository's
	// default branch.
	BaseBranch string `json:"baseBranch,omitempty"`
	// AutoMerge merges a pull request once its review quorum is met and
	// its head is green: every check run and commit status on it, the
	// RequiredChecks among them, and at least one reported when none is
	// required (coord/pulls' mergeGate).
	AutoMerge     bool        `json:"autoMerge"`
	MergeMethod   MergeMethod `json:"mergeMethod"`
	MaxIterations int         `json:"maxIterations"`
	// Reviewers maps a forge login to the reviewer name the review gate
	// knows; a login not mapped counts as itself.
	Reviewers map[string]string `json:"reviewers,omitempty"`
	// RequiredChecks names the checks autoMerge waits for, as a branch
	// protection's required status checks do: each must be reported on
	// the head (a check run's name or a commit status's context, compared
	// exactly) and green before it merges.
	RequiredChecks []string `json:"requiredChecks,omitempty"`
}

var (
	forgeRepoRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$`)
	// loginRE is a GitHub login: alphanumerics and single hyphens, at
	// most 39 (bots end in [bot]).
	loginRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$`)
	// branchRE is a plain branch name; git's other rules (no "..", no
	// ending in ".lock") are checked apart.
	branchRE = regexp.MustCompile(`^[A-Za-z0-9._/-]{1,200}$`)
)

// Normalize fills the defaults and checks the forge of a product owning
// owned, naming the field at fault (under field).
func (f *ForgeConfig) Normalize(field string, owned []string) error {
	if f.Kind == "" {
		f.Kind = ForgeGitHub
	}
	if !slices.Contains(ForgeKinds(), f.Kind) {
		return Invalid(field+".kind", "unknown forge %q (want %s)", f.Kind, alternatives(ForgeKinds()))
	}
	if len(f.Repos) == 0 {
		return Invalid(field+".repos", "is required: map each repo the product owns to owner/name on the forge")
	}
	for _, r := range slices.Sorted(maps.Keys(f.Repos)) {
		if !slices.Contains(owned, r) {
			return Invalid(field+".repos."+r, "the product does not own repo %q", r)
		}
		if !forgeRepoRE.MatchString(f.Repos[r]) {
			return Invalid(field+".repos."+r, "%q is not owner/name", f.Repos[r])
		}
	}
	if f.BaseBranch != "" && (!branchRE.MatchString(f.BaseBranch) || strings.Contains(f.BaseBranch, "..") ||
		strings.HasPrefix(f.BaseBranch, "-") || strings.HasSuffix(f.BaseBranch, ".lock") || strings.HasSuffix(f.BaseBranch, "/")) {
		return Invalid(field+".baseBranch", "%q is not a branch name", f.BaseBranch)
	}
	if f.MergeMethod == "" {
		f.MergeMethod = MergeSquash
	}
	if !slices.Contains(MergeMethods(), f.MergeMethod) {
		return Invalid(field+".mergeMethod", "unknown merge method %q (want %s)", f.MergeMethod, alternatives(MergeMethods()))
	}
	if f.MaxIterations == 0 {
		f.MaxIterations = DefaultMaxIterations
	}
	if f.MaxIterations < 1 || f.MaxIterations > MaxMaxIterations {
		return Invalid(field+".maxIterations", "must be between 1 and %d, got %d", MaxMaxIterations, f.MaxIterations)
	}
	seen := map[string]string{}
	for _, login := range slices.Sorted(maps.Keys(f.Reviewers)) {
		if !loginRE.MatchString(login) {
			return Invalid(field+".reviewers", "%q is not a forge login", login)
		}
		// Logins are case-insensitive on the forge (GitHub's are).
		if other, ok := seen[strings.ToLower(login)]; ok {
			return Invalid(field+".reviewers."+login, "the same login as %q: logins are case-insensitive", other)
		}
		seen[strings.ToLower(login)] = login
		if err := ValidateName(field+".reviewers."+login, f.Reviewers[login]); err != nil {
			return err
		}
	}
	return f.normalizeRequiredChecks(field + ".requiredChecks")
}

// normalizeRequiredChecks trims each required check's name and refuses an
// empty one, a duplicate and a list past MaxRequiredChecks: a name listed
// twice or blank is a typo the operator should hear of, not one a merge
// silently waits on forever.
func (f *ForgeConfig) normalizeRequiredChecks(field string) error {
	if len(f.RequiredChecks) > MaxRequiredChecks {
		return Invalid(field, "has %d entries, at most %d allowed", len(f.RequiredChecks), MaxRequiredChecks)
	}
	if len(f.RequiredChecks) == 0 {
		f.RequiredChecks = nil
		return nil
	}
	names := make([]string, len(f.RequiredChecks))
	for i, raw := range f.RequiredChecks {
		at := fmt.Sprintf("%s[%d]", field, i)
		name := strings.TrimSpace(raw)
		if name == "" {
			return Invalid(at, "is empty: name a check run or a commit status context")
		}
		if err := ValidateText(at, name, MaxCheckNameLen); err != nil {
			return err
		}
		if strings.ContainsAny(name, "\t\n\r") {
			return Invalid(at, "%q must be one line", name)
		}
		if j := slices.Index(names[:i], name); j >= 0 {
			return Invalid(at, "%q is listed already (%s[%d])", name, field, j)
		}
		names[i] = name
	}
	f.RequiredChecks = names
	return nil
}

// Names says the product's reviewers map login: the operator named it, so
// its reviews count whatever the forge says of its membership (GitHub
// reports an organization member whose membership is private as a
// CONTRIBUTOR).
func (f *ForgeConfig) Names(login string) bool {
	_, ok := f.reviewer(login)
	return ok
}

// ReviewerOf is the reviewer name a forge login votes as: the name the
// product's reviewers map it to, else the login itself, unless that login
// is a name they map another login to (ok false): an account called
// "alice" on the forge must not vote as the operator's reviewer alice,
// whose own login is mapped.
func (f *ForgeConfig) ReviewerOf(login string) (name string, ok bool) {
	if name, ok := f.reviewer(login); ok {
		return name, true
	}
	for _, name := range f.Reviewers {
		if strings.EqualFold(name, login) {
			return "", false
		}
	}
	return login, true
}

// reviewer looks login up in Reviewers as the forge compares logins:
// without regard to case (a mapping typed "Alice" is the login "alice").
func (f *ForgeConfig) reviewer(login string) (string, bool) {
	if name, ok := f.Reviewers[login]; ok {
		return name, true
	}
	for l, name := range f.Reviewers {
		if strings.EqualFold(l, login) {
			return name, true
		}
	}
	return "", false
}

// ProductsFor returns, among products, those whose forge maps a repo to
// forgeRepo ("owner/name"), in order: several products may own the same
// repository (RepoInfo.Products), each with its own jobs on it.
func ProductsFor(products []*Product, forgeRepo string) []*Product {
	var out []*Product
	for _, p := range products {
		if p == nil || p.Forge == nil {
			continue
		}
		for _, fr := range p.Forge.Repos {
			if strings.EqualFold(fr, forgeRepo) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// PullRequestState is a job's pull request's state.
type PullRequestState string

const (
	PROpen   PullRequestState = "open"
	PRClosed PullRequestState = "closed"
	PRMerged PullRequestState = "merged"
)

// PullRequest is the pull request a delivered job has on its product's
// forge.
type PullRequest struct {
	// Repo is the forge's repository, owner/name.
	Repo    string           `json:"repo"`
	Number  int              `json:"number"`
	URL     string           `json:"url"`
	HeadSHA string           `json:"headSha"`
	State   PullRequestState `json:"state"`
}

// FeedbackSource says where feedback came from.
type FeedbackSource string

const (
	FeedbackReview FeedbackSource = "review"
	FeedbackCheck  FeedbackSource = "check"
)

// Feedback is what a reviewer or a check said of a delivered head, handed
// to the engine as the next iteration's task.
type Feedback struct {
	// Iteration is the iteration it asks for (2 for the first feedback).
	Iteration int            `json:"iteration"`
	Source    FeedbackSource `json:"source"`
	Author    string         `json:"author,omitempty"`
	// Name is the check's name.
	Name string    `json:"name,omitempty"`
	Body string    `json:"body"`
	URL  string    `json:"url,omitempty"`
	At   time.Time `json:"at"`
}

// PRSync is the forge work a job waits for: its pull request to open or
// be brought up to date after a delivery.
type PRSync struct {
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"lastError,omitempty"`
	NextAttemptAt time.Time `json:"nextAttemptAt,omitzero"`
}

// MaxForgeDeliveries is how many webhook deliveries a job remembers to
// ignore a redelivery or replay of.
const MaxForgeDeliveries = 32

// SeenDelivery records a webhook delivery (its id or its body's digest)
// and reports whether it was seen before.
func (j *Job) SeenDelivery(keys ...string) bool {
	for _, k := range keys {
		if slices.Contains(j.ForgeDeliveries, k) {
			return true
		}
	}
	j.ForgeDeliveries = append(slices.Clone(j.ForgeDeliveries), keys...)
	if n := len(j.ForgeDeliveries) - MaxForgeDeliveries; n > 0 {
		j.ForgeDeliveries = slices.Clone(j.ForgeDeliveries[n:])
	}
	return false
}

// AddFeedback keeps fb on the job, the newest MaxFeedback, bodies bounded.
func (j *Job) AddFeedback(fb ...Feedback) {
	for i := range fb {
		fb[i].Body = SanitizeText(fb[i].Body, MaxFeedbackBody)
	}
	j.Feedback = append(slices.Clone(j.Feedback), fb...)
	if n := len(j.Feedback) - MaxFeedback; n > 0 {
		j.Feedback = slices.Clone(j.Feedback[n:])
	}
}

// CurrentIteration is the job's iteration, counting from 1.
func (j *Job) CurrentIteration() int { return max(j.Iteration, 1) }
