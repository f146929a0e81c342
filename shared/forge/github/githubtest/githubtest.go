// Package githubtest is a GitHub double: the REST endpoints the fleet's
// GitHub adapter uses, over an in-memory set of repositories and pull
// requests, and the webhooks GitHub would send about them, signed. The
// adapter's tests, the black-box tests and the demo's forge double
// (local/demo) run against it.
//
// Its answers and payloads are GitHub's own examples and schemas
// (templates/, made from @octokit/openapi and @octokit/openapi-webhooks by
// `go test ./shared/forge/github/githubtest -update`) with the values of
// the moment filled in; its tests validate what it serves against those
// descriptions (package octokit), so the double cannot drift from GitHub.
package githubtest

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gigafactory/fleet/shared/forge/github"
)

//go:embed templates/*.json
var templates embed.FS

// template returns a fresh copy of the named template.
func template(name string) map[string]any {
	b, err := templates.ReadFile("templates/" + name + ".json")
	if err != nil {
		panic(fmt.Sprintf("githubtest: template %s: %v", name, err))
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("githubtest: template %s: %v", name, err))
	}
	return m
}

// set puts v at the dotted path in m, making objects on the way.
func set(m map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

// Repo is one repository of the double.
type Repo struct {
	Owner, Name   string
	DefaultBranch string
	// GitDir, when set, is a git repository (a bare origin) whose branches
	// give the pull requests' head SHAs; else a branch's SHA is made up
	// from its name and a counter.
	GitDir string
}

// Pull is a pull request the double holds.
type Pull struct {
	Number      int
	Repo        string // owner/name
	Title, Body string
	Head, Base  string
	HeadSHA     string
	State       string // open, closed
	Merged      bool
	MergeMethod string
	MergedSHA   string
}

// Check is a check run the double reports on a commit.
type Check struct {
	Name, Status, Conclusion string
	Title, Summary, Text     string
}

// ReviewComment is a comment a review leaves on a line of the diff.
type ReviewComment struct {
	Path string
	Line int
	Body string
}

// Status is a commit status the double reports on a commit: the latest of
// its context.
type Status struct {
	Context, State, Description string
}

// Server is the double. Its zero value is not usable: call New.
type Server struct {
	mu       sync.Mutex
	repos    map[string]*Repo // owner/name
	pulls    []*Pull
	checks   map[string][]Check  // sha -> checks
	statuses map[string][]Status // sha -> statuses
	// Unmergeable makes merges answer 405, with this reason.
	unmergeable map[int]string
	deleted     []string
	requests    []string
	// shas are the heads of branches the double made up (no git dir):
	// "owner/name:branch" -> sha.
	shas map[string]string
	// behind are the branches ("owner/name:branch") whose pull requests
	// still show the head before the last push (PushBehind).
	behind map[string]bool
	// reviews are the reviews submitted, by id: their comments on the diff.
	reviews map[int64]review
	now     func() time.Time
}

type review struct {
	repo     string
	number   int
	comments []ReviewComment
}

// New is a double holding repos.
func New(now func() time.Time, repos ...Repo) *Server {
	if now == nil {
		now = time.Now
	}
	s := &Server{repos: map[string]*Repo{}, checks: map[string][]Check{}, statuses: map[string][]Status{}, unmergeable: map[int]string{},
		shas: map[string]string{}, behind: map[string]bool{}, reviews: map[int64]review{}, now: now}
	for _, r := range repos {
		if r.DefaultBranch == "" {
			r.DefaultBranch = "main"
		}
		s.repos[r.Owner+"/"+r.Name] = &r
	}
	return s
}

// Handler serves the REST endpoints the adapter uses.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /repos/{owner}/{repo}", s.getRepo)
	mux.HandleFunc("GET /repos/{owner}/{repo}/pulls", s.listPulls)
	mux.HandleFunc("POST /repos/{owner}/{repo}/pulls", s.createPull)
	mux.HandleFunc("PATCH /repos/{owner}/{repo}/pulls/{number}", s.updatePull)
	mux.HandleFunc("PUT /repos/{owner}/{repo}/pulls/{number}/merge", s.mergePull)
	mux.HandleFunc("GET /repos/{owner}/{repo}/git/ref/{ref...}", s.getRef)
	mux.HandleFunc("DELETE /repos/{owner}/{repo}/git/refs/{ref...}", s.deleteBranch)
	mux.HandleFunc("GET /repos/{owner}/{repo}/commits/{ref...}", s.commitChecks)
	mux.HandleFunc("GET /repos/{owner}/{repo}/pulls/{number}/reviews/{review}/comments", s.reviewComments)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Requires authentication", "documentation_url": "https://docs.github.com/rest"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Requests lists "METHOD path" of every request served, in order.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Pulls returns copies of the pull requests, in number order.
func (s *Server) Pulls() []Pull {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Pull, len(s.pulls))
	for i, p := range s.pulls {
		out[i] = *p
	}
	return out
}

// Deleted lists the branches deleted, "owner/name:branch".
func (s *Server) Deleted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.deleted...)
}

// SetChecks sets the checks on a commit.
func (s *Server) SetChecks(sha string, checks ...Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[sha] = checks
}

// SetStatuses sets the commit statuses on a commit (one per context).
func (s *Server) SetStatuses(sha string, statuses ...Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses[sha] = statuses
}

// SetUnmergeable makes merges of pull request number refused (405) with
// reason; "" makes it mergeable again.
func (s *Server) SetUnmergeable(number int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reason == "" {
		delete(s.unmergeable, number)
		return
	}
	s.unmergeable[number] = reason
}

// Push moves a branch of the double (no git dir): a new head SHA for the
// pull requests of that head.
func (s *Server) Push(repo, branch, sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shas[repo+":"+branch] = sha
	delete(s.behind, repo+":"+branch)
	for _, p := range s.pulls {
		if p.Repo == repo && p.Head == branch && p.State == "open" {
			p.HeadSHA = sha
		}
	}
}

// PushBehind moves a branch as Push does, but its pull requests keep
// showing the previous head, as GitHub's do for a moment after a push (a
// pull request's head is updated asynchronously); Push catches them up.
func (s *Server) PushBehind(repo, branch, sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shas[repo+":"+branch] = sha
	s.behind[repo+":"+branch] = true
}

func (s *Server) repo(w http.ResponseWriter, r *http.Request) *Repo {
	rp, ok := s.repos[r.PathValue("owner")+"/"+r.PathValue("repo")]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
		return nil
	}
	return rp
}

// headSHA is the branch's head: from the git dir when there is one.
func (s *Server) headSHA(rp *Repo, branch string) string {
	if rp.GitDir != "" {
		out, err := exec.Command("git", "-C", rp.GitDir, "rev-parse", "--verify", "-q", "refs/heads/"+branch).Output()
		if err == nil {
			return strings.TrimSpace(string(out))
		}
	}
	key := rp.Owner + "/" + rp.Name + ":" + branch
	if sha, ok := s.shas[key]; ok {
		return sha
	}
	sha := fmt.Sprintf("%040x", 0xc0ffee00+len(s.shas))
	s.shas[key] = sha
	return sha
}

func (s *Server) getRepo(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repo(w, r)
	if rp == nil {
		return
	}
	m := template("rest-repo")
	s.fillRepo(m, rp)
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) fillRepo(m map[string]any, rp *Repo) {
	set(m, "name", rp.Name)
	set(m, "full_name", rp.Owner+"/"+rp.Name)
	set(m, "owner.login", rp.Owner)
	set(m, "default_branch", rp.DefaultBranch)
	set(m, "html_url", "https://github.com/"+rp.Owner+"/"+rp.Name)
}

// refresh reads an open pull request's head again: with a git dir, pushes
// move it as on GitHub.
func (s *Server) refresh(p *Pull) {
	if rp := s.repos[p.Repo]; p.State == "open" && rp.GitDir != "" {
		p.HeadSHA = s.headSHA(rp, p.Head)
	}
}

// pullJSON is a pull request as the REST API shows it (simple: the list's
// shape).
func (s *Server) pullJSON(p *Pull, simple bool) map[string]any {
	s.refresh(p)
	name := "rest-pull"
	if simple {
		name = "rest-pull-simple"
	}
	m := template(name)
	rp := s.repos[p.Repo]
	url := fmt.Sprintf("https://github.com/%s/pull/%d", p.Repo, p.Number)
	set(m, "number", p.Number)
	set(m, "id", 1000+p.Number)
	set(m, "html_url", url)
	set(m, "title", p.Title)
	set(m, "body", p.Body)
	set(m, "state", p.State)
	set(m, "head.ref", p.Head)
	set(m, "head.sha", p.HeadSHA)
	set(m, "head.label", rp.Owner+":"+p.Head)
	set(m, "base.ref", p.Base)
	set(m, "base.label", rp.Owner+":"+p.Base)
	for _, side := range []string{"head.repo", "base.repo"} {
		repo, _ := m[strings.Split(side, ".")[0]].(map[string]any)["repo"].(map[string]any)
		if repo != nil {
			s.fillRepo(repo, rp)
		}
	}
	if !simple {
		set(m, "merged", p.Merged)
		set(m, "mergeable", p.State == "open")
	}
	if p.Merged {
		set(m, "merge_commit_sha", p.MergedSHA)
	}
	return m
}

func (s *Server) listPulls(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repo(w, r)
	if rp == nil {
		return
	}
	owner, head, _ := strings.Cut(r.URL.Query().Get("head"), ":")
	state := r.URL.Query().Get("state")
	if state == "" {
		state = "open"
	}
	out := []any{}
	for _, p := range s.pulls {
		if p.Repo != rp.Owner+"/"+rp.Name || (head != "" && (owner != rp.Owner || p.Head != head)) || (state != "all" && p.State != state) {
			continue
		}
		out = append(out, s.pullJSON(p, true))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createPull(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repo(w, r)
	if rp == nil {
		return
	}
	var in struct{ Title, Head, Base, Body string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Head == "" || in.Base == "" {
		writeJSON(w, http.StatusUnprocessableEntity, validationFailed("Validation Failed", "head"))
		return
	}
	for _, p := range s.pulls {
		if p.Repo == rp.Owner+"/"+rp.Name && p.Head == in.Head && p.State == "open" {
			writeJSON(w, http.StatusUnprocessableEntity, validationFailed("A pull request already exists for "+rp.Owner+":"+in.Head+".", ""))
			return
		}
	}
	p := &Pull{Number: len(s.pulls) + 1, Repo: rp.Owner + "/" + rp.Name, Title: in.Title, Body: in.Body, Head: in.Head, Base: in.Base, State: "open"}
	p.HeadSHA = s.headSHA(rp, in.Head)
	s.pulls = append(s.pulls, p)
	writeJSON(w, http.StatusCreated, s.pullJSON(p, false))
}

func validationFailed(msg, field string) map[string]any {
	m := map[string]any{"message": "Validation Failed", "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
		"errors": []any{map[string]any{"resource": "PullRequest", "code": "custom", "message": msg}}}
	if field != "" {
		m["errors"] = []any{map[string]any{"resource": "PullRequest", "code": "missing_field", "field": field}}
	}
	return m
}

func (s *Server) pull(w http.ResponseWriter, r *http.Request, rp *Repo) *Pull {
	n, _ := strconv.Atoi(r.PathValue("number"))
	for _, p := range s.pulls {
		if p.Repo == rp.Owner+"/"+rp.Name && p.Number == n {
			return p
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
	return nil
}

// repoPull finds the request's repository and pull request, answering 404
// for either missing (nil, nil). The caller holds the lock.
func (s *Server) repoPull(w http.ResponseWriter, r *http.Request) (*Repo, *Pull) {
	rp := s.repo(w, r)
	if rp == nil {
		return nil, nil
	}
	p := s.pull(w, r, rp)
	if p == nil {
		return nil, nil
	}
	return rp, p
}

func (s *Server) updatePull(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp, p := s.repoPull(w, r)
	if p == nil {
		return
	}
	var in struct {
		Title, Body *string
		State       *string
	}
	_ = json.NewDecoder(r.Body).Decode(&in)
	if in.Title != nil {
		p.Title = *in.Title
	}
	if in.Body != nil {
		p.Body = *in.Body
	}
	if in.State != nil {
		p.State = *in.State
	}
	if p.State == "open" && !s.behind[p.Repo+":"+p.Head] {
		p.HeadSHA = s.headSHA(rp, p.Head)
	}
	writeJSON(w, http.StatusOK, s.pullJSON(p, false))
}

func (s *Server) mergePull(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp, p := s.repoPull(w, r)
	if p == nil {
		return
	}
	var in struct {
		SHA         string `json:"sha"`
		MergeMethod string `json:"merge_method"`
	}
	_ = json.NewDecoder(r.Body).Decode(&in)
	if p.State == "open" && !s.behind[p.Repo+":"+p.Head] {
		p.HeadSHA = s.headSHA(rp, p.Head)
	}
	switch {
	case p.State != "open" || s.unmergeable[p.Number] != "":
		reason := s.unmergeable[p.Number]
		if reason == "" {
			reason = "Pull Request is not mergeable"
		}
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"message": reason, "documentation_url": "https://docs.github.com/rest/pulls/pulls#merge-a-pull-request"})
		return
	case in.SHA != "" && in.SHA != p.HeadSHA:
		writeJSON(w, http.StatusConflict, map[string]any{"message": "Head branch was modified. Review and try the merge again.",
			"documentation_url": "https://docs.github.com/rest/pulls/pulls#merge-a-pull-request"})
		return
	}
	p.State, p.Merged, p.MergeMethod = "closed", true, in.MergeMethod
	p.MergedSHA = fmt.Sprintf("%040x", 0xfeed0000+p.Number)
	m := template("rest-merge")
	set(m, "sha", p.MergedSHA)
	set(m, "merged", true)
	set(m, "message", "Pull Request successfully merged")
	writeJSON(w, http.StatusOK, m)
}

// getRef answers a branch's ref (heads/<branch>) with its head.
func (s *Server) getRef(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repo(w, r)
	if rp == nil {
		return
	}
	ref := r.PathValue("ref")
	branch, ok := strings.CutPrefix(ref, "heads/")
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
		return
	}
	sha := s.headSHA(rp, branch)
	api := "https://api.github.com/repos/" + rp.Owner + "/" + rp.Name + "/git/"
	m := template("rest-git-ref")
	set(m, "ref", "refs/"+ref)
	set(m, "url", api+"refs/"+ref)
	set(m, "object.sha", sha)
	set(m, "object.url", api+"commits/"+sha)
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) deleteBranch(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repo(w, r)
	if rp == nil {
		return
	}
	branch, ok := strings.CutPrefix(r.PathValue("ref"), "heads/")
	if !ok {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Reference does not exist", "documentation_url": "https://docs.github.com/rest/git/refs#delete-a-reference"})
		return
	}
	s.deleted = append(s.deleted, rp.Owner+"/"+rp.Name+":"+branch)
	w.WriteHeader(http.StatusNoContent)
}

// commitChecks serves a commit's check runs (…/check-runs) and its
// combined status (…/status), paginated as GitHub does: per_page (default
// 30, at most 100) and page, total_count counting every page.
func (s *Server) commitChecks(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repo(w, r)
	if rp == nil {
		return
	}
	if ref, ok := strings.CutSuffix(r.PathValue("ref"), "/check-runs"); ok {
		all := s.checks[ref]
		lo, hi := pageOf(r, len(all))
		runs := []any{}
		for i := lo; i < hi; i++ {
			runs = append(runs, s.checkRunJSON(rp, ref, i, all[i]))
		}
		writeJSON(w, http.StatusOK, map[string]any{"total_count": len(all), "check_runs": runs})
		return
	}
	if ref, ok := strings.CutSuffix(r.PathValue("ref"), "/status"); ok {
		writeJSON(w, http.StatusOK, s.combinedStatusJSON(r, rp, ref))
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
}

// reviewComments lists a review's comments on the diff, a page of them.
func (s *Server) reviewComments(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repo(w, r)
	if rp == nil {
		return
	}
	id, _ := strconv.ParseInt(r.PathValue("review"), 10, 64)
	rv, ok := s.reviews[id]
	if !ok || rv.repo != rp.Owner+"/"+rp.Name || strconv.Itoa(rv.number) != r.PathValue("number") {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
		return
	}
	lo, hi := pageOf(r, len(rv.comments))
	out := []any{}
	for i := lo; i < hi; i++ {
		c := rv.comments[i]
		m := template("rest-review-comment")
		set(m, "id", 9100+i)
		set(m, "pull_request_review_id", id)
		set(m, "path", c.Path)
		set(m, "line", c.Line)
		set(m, "body", c.Body)
		set(m, "html_url", fmt.Sprintf("https://github.com/%s/pull/%d#discussion_r%d", rv.repo, rv.number, 9100+i))
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
}

// pageOf is the slice [lo, hi) of n items the request's page holds.
func pageOf(r *http.Request, n int) (lo, hi int) {
	per, err := strconv.Atoi(r.URL.Query().Get("per_page"))
	if err != nil || per < 1 {
		per = 30
	}
	per = min(per, 100)
	page, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || page < 1 {
		page = 1
	}
	lo = min((page-1)*per, n)
	return lo, min(lo+per, n)
}

// combinedStatusJSON is the combined status of ref: the page of its
// statuses asked for, and the state of all of them as GitHub combines it:
// failure if any is error or failure, else pending if any is pending or
// there is none, else success.
func (s *Server) combinedStatusJSON(r *http.Request, rp *Repo, ref string) map[string]any {
	m := template("rest-combined-status")
	item := m["statuses"].([]any)[0].(map[string]any)
	all := s.statuses[ref]
	state := "success"
	if len(all) == 0 {
		state = "pending"
	}
	for _, st := range all {
		switch {
		case st.State == "error" || st.State == "failure":
			state = "failure"
		case st.State == "pending" && state != "failure":
			state = "pending"
		}
	}
	lo, hi := pageOf(r, len(all))
	page := []any{}
	for i := lo; i < hi; i++ {
		st := all[i]
		b, _ := json.Marshal(item)
		var one map[string]any
		_ = json.Unmarshal(b, &one)
		set(one, "id", 7000+i)
		set(one, "context", st.Context)
		set(one, "state", st.State)
		set(one, "description", st.Description)
		set(one, "target_url", fmt.Sprintf("https://ci.example.com/%s/%d", rp.Name, 7000+i))
		page = append(page, one)
	}
	set(m, "state", state)
	set(m, "statuses", page)
	set(m, "sha", ref)
	set(m, "total_count", len(all))
	set(m, "repository.name", rp.Name)
	set(m, "repository.full_name", rp.Owner+"/"+rp.Name)
	set(m, "repository.owner.login", rp.Owner)
	return m
}

func (s *Server) checkRunJSON(rp *Repo, sha string, i int, c Check) map[string]any {
	m := template("rest-check-run")
	set(m, "id", 5000+i)
	set(m, "name", c.Name)
	set(m, "head_sha", sha)
	set(m, "status", c.Status)
	if c.Status == "completed" {
		set(m, "conclusion", c.Conclusion)
	} else {
		set(m, "conclusion", nil)
	}
	set(m, "html_url", fmt.Sprintf("https://github.com/%s/%s/runs/%d", rp.Owner, rp.Name, 5000+i))
	set(m, "output.title", c.Title)
	set(m, "output.summary", c.Summary)
	set(m, "output.text", c.Text)
	return m
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Delivery is one webhook the double sends: its event, its delivery id and
// its payload, signed by Send.
type Delivery struct {
	Event   string
	ID      string
	Payload []byte
	// Webhook names its schema in @octokit/openapi-webhooks.
	Webhook string
}

// Review is a pull_request_review submitted on pull request number by
// login, a collaborator, with state approved or changes_requested.
func (s *Server) Review(number int, login, state, body string) Delivery {
	return s.ReviewAs(number, login, "COLLABORATOR", state, body)
}

// ReviewAs is Review by a login associated with the repository as
// association (GitHub's author_association: OWNER, MEMBER, COLLABORATOR,
// CONTRIBUTOR, NONE...).
func (s *Server) ReviewAs(number int, login, association, state, body string) Delivery {
	return s.submitReview(number, login, association, state, body, nil)
}

// ReviewWithComments is Review leaving comments on lines of the diff, which
// the REST API then lists for the review.
func (s *Server) ReviewWithComments(number int, login, state, body string, comments ...ReviewComment) Delivery {
	return s.submitReview(number, login, "COLLABORATOR", state, body, comments)
}

func (s *Server) submitReview(number int, login, association, state, body string, comments []ReviewComment) Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pullByNumber(number)
	id := int64(80 + len(s.reviews))
	s.reviews[id] = review{repo: p.Repo, number: p.Number, comments: comments}
	m := template("webhook-pull-request-review-submitted")
	set(m, "action", "submitted")
	set(m, "review.id", id)
	set(m, "review.state", state)
	set(m, "review.body", body)
	set(m, "review.commit_id", p.HeadSHA)
	set(m, "review.user.login", login)
	set(m, "review.author_association", association)
	set(m, "review.html_url", fmt.Sprintf("https://github.com/%s/pull/%d#pullrequestreview-%d", p.Repo, p.Number, id))
	set(m, "review.submitted_at", s.now().UTC().Format(time.RFC3339))
	s.fillHookPull(m, p)
	return s.delivery("pull_request_review", "pull-request-review-submitted", m)
}

// CheckRun is a check_run completed with conclusion on pull request
// number's head, with the output given.
func (s *Server) CheckRun(number int, c Check) Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pullByNumber(number)
	m := template("webhook-check-run-completed")
	rp := s.repos[p.Repo]
	set(m, "action", "completed")
	set(m, "check_run.name", c.Name)
	set(m, "check_run.status", "completed")
	set(m, "check_run.conclusion", c.Conclusion)
	set(m, "check_run.head_sha", p.HeadSHA)
	set(m, "check_run.html_url", fmt.Sprintf("https://github.com/%s/runs/%d", p.Repo, 9000+p.Number))
	set(m, "check_run.completed_at", s.now().UTC().Format(time.RFC3339))
	set(m, "check_run.output.title", c.Title)
	set(m, "check_run.output.summary", c.Summary)
	set(m, "check_run.output.text", c.Text)
	if prs, ok := m["check_run"].(map[string]any)["pull_requests"].([]any); ok && len(prs) > 0 {
		pr := prs[0].(map[string]any)
		set(pr, "number", p.Number)
		set(pr, "head.ref", p.Head)
		set(pr, "head.sha", p.HeadSHA)
		set(pr, "base.ref", p.Base)
	}
	s.fillHookRepo(m, rp)
	return s.delivery("check_run", "check-run-completed", m)
}

// CommitStatus is a status created on pull request number's head, as a CI
// that posts statuses (Jenkins) sends it; SetStatuses is what the REST API
// then lists.
func (s *Server) CommitStatus(number int, st Status) Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pullByNumber(number)
	m := template("webhook-status")
	rp := s.repos[p.Repo]
	set(m, "id", 7100+len(s.requests))
	set(m, "sha", p.HeadSHA)
	set(m, "name", p.Repo)
	set(m, "context", st.Context)
	set(m, "state", st.State)
	set(m, "description", st.Description)
	set(m, "target_url", fmt.Sprintf("https://ci.example.com/%s/%d", rp.Name, 7100+len(s.requests)))
	set(m, "commit.sha", p.HeadSHA)
	set(m, "created_at", s.now().UTC().Format(time.RFC3339))
	set(m, "updated_at", s.now().UTC().Format(time.RFC3339))
	if bs, ok := m["branches"].([]any); ok && len(bs) > 0 {
		b := bs[0].(map[string]any)
		set(b, "name", p.Head)
		set(b, "commit.sha", p.HeadSHA)
	}
	s.fillHookRepo(m, rp)
	return s.delivery("status", "status", m)
}

// Closed is a pull_request closed (merged or not) on pull request number;
// it also closes the double's pull request.
func (s *Server) Closed(number int, merged bool) Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pullByNumber(number)
	p.State, p.Merged = "closed", merged
	m := template("webhook-pull-request-closed")
	set(m, "action", "closed")
	s.fillHookPull(m, p)
	set(m, "pull_request.merged", merged)
	set(m, "pull_request.state", "closed")
	return s.delivery("pull_request", "pull-request-closed", m)
}

func (s *Server) pullByNumber(number int) *Pull {
	for _, p := range s.pulls {
		if p.Number == number {
			s.refresh(p)
			return p
		}
	}
	panic(fmt.Sprintf("githubtest: no pull request %d", number))
}

func (s *Server) fillHookPull(m map[string]any, p *Pull) {
	rp := s.repos[p.Repo]
	set(m, "pull_request.number", p.Number)
	set(m, "pull_request.html_url", fmt.Sprintf("https://github.com/%s/pull/%d", p.Repo, p.Number))
	set(m, "pull_request.title", p.Title)
	set(m, "pull_request.head.ref", p.Head)
	set(m, "pull_request.head.sha", p.HeadSHA)
	set(m, "pull_request.base.ref", p.Base)
	s.fillHookRepo(m, rp)
}

func (s *Server) fillHookRepo(m map[string]any, rp *Repo) {
	set(m, "repository.name", rp.Name)
	set(m, "repository.full_name", rp.Owner+"/"+rp.Name)
	set(m, "repository.owner.login", rp.Owner)
	set(m, "repository.default_branch", rp.DefaultBranch)
}

func (s *Server) delivery(event, webhook string, m map[string]any) Delivery {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return Delivery{Event: event, Webhook: webhook, ID: fmt.Sprintf("%08x-0000-4000-8000-%012x", len(s.requests)+len(b), s.now().UnixNano()&0xffffffffffff), Payload: b}
}

// Send POSTs d to url as GitHub would, signed with secret, and returns the
// status.
func Send(ctx context.Context, url string, secret []byte, d Delivery) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Payload))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/githubtest")
	req.Header.Set(github.HeaderEvent, d.Event)
	req.Header.Set(github.HeaderDelivery, d.ID)
	req.Header.Set(github.HeaderSignature, github.Sign(secret, d.Payload))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}
