// Package github is the forge port on GitHub: pull requests, merges,
// branches and checks over the REST API (client.go), and its webhooks
// verified and read (webhook.go).
//
// It speaks to the documented endpoints with net/http rather than through
// google/go-github: the fleet needs eight endpoints and their error
// statuses, the client's every request and every answer it reads is
// validated in the tests against GitHub's own OpenAPI description
// (@octokit/openapi), and a small typed client keeps what is sent exactly
// what that description says. Endpoints (docs.github.com/en/rest/pulls,
// /en/rest/git/refs, /en/rest/checks/runs, /en/rest/commits/statuses,
// /en/rest/repos):
//
//	GET    /repos/{owner}/{repo}                              default branch
//	GET    /repos/{owner}/{repo}/pulls?head=owner:branch&state=open
//	POST   /repos/{owner}/{repo}/pulls                        201; 422 when one exists
//	PATCH  /repos/{owner}/{repo}/pulls/{pull_number}
//	PUT    /repos/{owner}/{repo}/pulls/{pull_number}/merge    200; 405 not mergeable; 409 head moved
//	GET    /repos/{owner}/{repo}/git/ref/heads/{branch}       the branch's head
//	DELETE /repos/{owner}/{repo}/git/refs/heads/{branch}      204; 422 when gone
//	GET    /repos/{owner}/{repo}/commits/{ref}/check-runs     every page (per_page=100, page) to total_count
//	GET    /repos/{owner}/{repo}/commits/{ref}/status         the combined status, every page likewise
package github

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/forge"
)

// DefaultAPIURL is GitHub's REST API; GitHub Enterprise Server and test
// doubles give theirs (FLEET_GITHUB_API_URL).
const DefaultAPIURL = "https://api.github.com"

// APIVersion is the REST API version every request names
// (X-GitHub-Api-Version).
const APIVersion = "2022-11-28"

// maxAnswer bounds an answer the client reads (a page of pull requests or
// check runs is well under it).
const maxAnswer = 8 << 20

// Config configures the client.
type Config struct {
	// APIURL is the API's base URL; DefaultAPIURL when empty.
	APIURL string
	// Token authenticates every request (a token allowed to read and write
	// pull requests and contents).
	Token string
	// HTTP is the client to use; one with Timeout when nil.
	HTTP    *http.Client
	Timeout time.Duration
	// Now reads the clock for a rate limit's reset time; time.Now when nil.
	Now func() time.Time
}

// Client is the forge.Forge on GitHub.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	now   func() time.Time
}

var _ forge.Forge = (*Client)(nil)

// New checks cfg and builds the client.
func New(cfg Config) (*Client, error) {
	raw := cfg.APIURL
	if raw == "" {
		raw = DefaultAPIURL
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("github: API URL %q is not an absolute http(s) URL", raw)
	}
	if strings.TrimSpace(cfg.Token) == "" {
		return nil, errors.New("github: a token is required")
	}
	hc := cfg.HTTP
	if hc == nil {
		timeout := cfg.Timeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		hc = &http.Client{Timeout: timeout}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Client{base: u, token: strings.TrimSpace(cfg.Token), http: hc, now: now}, nil
}

// pull is the part of a pull request the fleet reads.
type pull struct {
	Number  int    `json:"number"`
	HTMLURL string `json:"html_url"`
	State   string `json:"state"`
	Merged  bool   `json:"merged"`
	Title   string `json:"title"`
	Body    string `json:"body"`
	Head    struct {
		Ref string `json:"ref"`
		SHA string `json:"sha"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

func (p pull) pullRequest() forge.PullRequest {
	st := forge.State(p.State)
	if p.Merged {
		st = forge.StateMerged
	}
	return forge.PullRequest{Number: p.Number, URL: p.HTMLURL, HeadSHA: p.Head.SHA, Base: p.Base.Ref, State: st}
}

// EnsurePullRequest finds the open pull request of spec.Head or opens one.
// Two deliveries racing to open it: the loser's 422 finds the winner's.
func (c *Client) EnsurePullRequest(ctx context.Context, spec forge.PullRequestSpec) (forge.PullRequest, bool, error) {
	if p, ok, err := c.openPull(ctx, spec); err != nil || ok {
		return p, false, err
	}
	base := spec.Base
	if base == "" {
		var repo struct {
			DefaultBranch string `json:"default_branch"`
		}
		if err := c.do(ctx, http.MethodGet, repoPath(spec.Repo), nil, nil, &repo); err != nil {
			return forge.PullRequest{}, false, err
		}
		base = repo.DefaultBranch
	}
	var created pull
	err := c.do(ctx, http.MethodPost, repoPath(spec.Repo)+"/pulls", nil,
		map[string]any{"title": spec.Title, "head": spec.Head, "base": base, "body": spec.Body}, &created)
	if fe, ok := errors.AsType[*forge.Error](err); ok && fe.Status == http.StatusUnprocessableEntity {
		// "A pull request already exists": opened since the look above.
		if p, found, ferr := c.openPull(ctx, spec); ferr != nil || found {
			return p, false, ferr
		}
	}
	if err != nil {
		return forge.PullRequest{}, false, err
	}
	return created.pullRequest(), true, nil
}

// openPull finds the open pull request of spec's head and brings its title
// and body up to date.
func (c *Client) openPull(ctx context.Context, spec forge.PullRequestSpec) (forge.PullRequest, bool, error) {
	q := url.Values{"head": {spec.Repo.Owner + ":" + spec.Head}, "state": {"open"}}
	var open []pull
	if err := c.do(ctx, http.MethodGet, repoPath(spec.Repo)+"/pulls", q, nil, &open); err != nil {
		return forge.PullRequest{}, false, err
	}
	for _, p := range open {
		if p.Head.Ref != spec.Head {
			continue
		}
		if p.Title != spec.Title || p.Body != spec.Body {
			var updated pull
			if err := c.do(ctx, http.MethodPatch, fmt.Sprintf("%s/pulls/%d", repoPath(spec.Repo), p.Number), nil,
				map[string]any{"title": spec.Title, "body": spec.Body}, &updated); err != nil {
				return forge.PullRequest{}, false, err
			}
			p = updated
		}
		// The sync follows a push, and for a moment after one GitHub's
		// pull request can still show the previous head (it is updated
		// asynchronously): the head is the branch's own.
		pr := p.pullRequest()
		var ref struct {
			Object struct {
				SHA string `json:"sha"`
			} `json:"object"`
		}
		if err := c.do(ctx, http.MethodGet, repoPath(spec.Repo)+"/git/ref/"+url.PathEscape("heads/"+spec.Head), nil, nil, &ref); err != nil {
			return forge.PullRequest{}, false, err
		}
		if ref.Object.SHA != "" {
			pr.HeadSHA = ref.Object.SHA
		}
		return pr, true, nil
	}
	return forge.PullRequest{}, false, nil
}

// Merge merges the pull request at sha. 405 (not mergeable), 409 (the head
// moved) and 422 are refusals carrying GitHub's message.
func (c *Client) Merge(ctx context.Context, repo forge.Repo, number int, method forge.MergeMethod, sha string) (string, error) {
	body := map[string]any{"merge_method": string(method)}
	if sha != "" {
		body["sha"] = sha
	}
	var out struct {
		Merged  bool   `json:"merged"`
		SHA     string `json:"sha"`
		Message string `json:"message"`
	}
	err := c.do(ctx, http.MethodPut, fmt.Sprintf("%s/pulls/%d/merge", repoPath(repo), number), nil, body, &out)
	if fe, ok := errors.AsType[*forge.Error](err); ok {
		switch fe.Status {
		case http.StatusMethodNotAllowed, http.StatusConflict, http.StatusUnprocessableEntity:
			fe.Kind = forge.KindRefused
		}
		return "", fe
	}
	if err != nil {
		return "", err
	}
	if !out.Merged {
		return "", &forge.Error{Kind: forge.KindRefused, Status: http.StatusOK, Message: bounded(out.Message)}
	}
	return out.SHA, nil
}

// DeleteBranch deletes refs/heads/branch; 404 and 422 (no such ref) mean
// it is gone already. The ref is one path parameter in GitHub's
// description ({ref}: "heads/<branch>"), so its slashes are escaped, as
// Octokit's URL templates do.
func (c *Client) DeleteBranch(ctx context.Context, repo forge.Repo, branch string) error {
	err := c.do(ctx, http.MethodDelete, repoPath(repo)+"/git/refs/"+url.PathEscape("heads/"+branch), nil, nil, nil)
	if fe, ok := errors.AsType[*forge.Error](err); ok && (fe.Status == http.StatusNotFound || fe.Status == http.StatusUnprocessableEntity) {
		return nil
	}
	return err
}

// Checks lists every check run on ref, page after page.
func (c *Client) Checks(ctx context.Context, repo forge.Repo, ref string) ([]forge.Check, error) {
	type page struct {
		TotalCount int        `json:"total_count"`
		CheckRuns  []checkRun `json:"check_runs"`
	}
	pages, err := listAll(ctx, c, repoPath(repo)+"/commits/"+url.PathEscape(ref)+"/check-runs",
		func(p *page) (int, int) { return len(p.CheckRuns), p.TotalCount })
	if err != nil {
		return nil, err
	}
	var checks []forge.Check
	for _, p := range pages {
		for _, r := range p.CheckRuns {
			checks = append(checks, r.check())
		}
	}
	return checks, nil
}

// commitStatus is the part of a commit status the fleet reads.
type commitStatus struct {
	Context     string `json:"context"`
	State       string `json:"state"`
	Description string `json:"description"`
	TargetURL   string `json:"target_url"`
}

// Statuses lists the latest status of every context on ref from the
// combined status, page after page.
func (c *Client) Statuses(ctx context.Context, repo forge.Repo, ref string) ([]forge.Status, error) {
	type page struct {
		// State is the combined state of every context, on every page.
		State      string         `json:"state"`
		TotalCount int            `json:"total_count"`
		Statuses   []commitStatus `json:"statuses"`
	}
	pages, err := listAll(ctx, c, repoPath(repo)+"/commits/"+url.PathEscape(ref)+"/status",
		func(p *page) (int, int) { return len(p.Statuses), p.TotalCount })
	if err != nil {
		return nil, err
	}
	var out []forge.Status
	seen := map[forge.StatusState]bool{}
	for _, p := range pages {
		for _, st := range p.Statuses {
			s := forge.Status{Context: st.Context, State: forge.StatusState(st.State), Description: bounded(st.Description), URL: st.TargetURL}
			seen[s.State] = true
			out = append(out, s)
		}
	}
	// The combined state covers every context, read or not ("failure" if
	// any is error or failure, "pending" if any is pending; "pending" too
	// when there is none). One that the statuses read do not explain (a
	// context that changed between pages) is kept as a status of its own,
	// so nobody concludes green from part of the list.
	combined := forge.StatusState(pages[0].State)
	if len(out) > 0 && combined != forge.StatusSuccess && !seen[combined] &&
		!(combined == forge.StatusFailure && seen[forge.StatusError]) {
		out = append(out, forge.Status{Context: "combined status", State: combined,
			Description: "GitHub's combined state is " + string(combined) + ", which the statuses read do not explain"})
	}
	return out, nil
}

// ReviewComments lists the comments review reviewID left on pull request
// number's diff: one page, the first forge.MaxReviewComments.
func (c *Client) ReviewComments(ctx context.Context, repo forge.Repo, number int, reviewID int64) ([]forge.ReviewComment, error) {
	var page []struct {
		Path    string `json:"path"`
		Line    *int   `json:"line"`
		Body    string `json:"body"`
		HTMLURL string `json:"html_url"`
	}
	path := fmt.Sprintf("%s/pulls/%d/reviews/%d/comments", repoPath(repo), number, reviewID)
	q := url.Values{"per_page": {strconv.Itoa(forge.MaxReviewComments)}}
	if err := c.do(ctx, http.MethodGet, path, q, nil, &page); err != nil {
		return nil, err
	}
	out := make([]forge.ReviewComment, 0, len(page))
	for _, rc := range page {
		line := 0
		if rc.Line != nil {
			line = *rc.Line
		}
		out = append(out, forge.ReviewComment{Path: rc.Path, Line: line, Body: bounded(rc.Body), URL: rc.HTMLURL})
	}
	return out, nil
}

// perPage is the longest page GitHub's list endpoints give; maxPages bounds
// one list read (2,000 check runs or statuses on one commit).
const (
	perPage  = 100
	maxPages = 20
)

// listAll reads every page of a list GitHub paginates with per_page and
// page and counts with total_count: until that many items are read or a
// page comes back short. count says how many items a page holds and the
// total it announces. A list past maxPages is an error, not part of it:
// what decides a merge must see every check.
func listAll[P any](ctx context.Context, c *Client, path string, count func(*P) (n, total int)) ([]*P, error) {
	var pages []*P
	read := 0
	for n := 1; n <= maxPages; n++ {
		p := new(P)
		q := url.Values{"per_page": {strconv.Itoa(perPage)}, "page": {strconv.Itoa(n)}}
		if err := c.do(ctx, http.MethodGet, path, q, nil, p); err != nil {
			return nil, err
		}
		pages = append(pages, p)
		got, total := count(p)
		read += got
		if read >= total || got < perPage {
			return pages, nil
		}
	}
	return nil, &forge.Error{Kind: forge.KindRefused,
		Message: fmt.Sprintf("%s lists more than %d items: not all of them were read", path, maxPages*perPage)}
}

// checkRun is the part of a check run the fleet reads (REST and webhooks).
type checkRun struct {
	Name       string `json:"name"`
	Status     string `json:"status"`
	Conclusion string `json:"conclusion"`
	HTMLURL    string `json:"html_url"`
	HeadSHA    string `json:"head_sha"`
	Output     struct {
		Title   string `json:"title"`
		Summary string `json:"summary"`
		Text    string `json:"text"`
	} `json:"output"`
}

func (r checkRun) check() forge.Check {
	return forge.Check{Name: r.Name, Completed: r.Status == "completed", Conclusion: r.Conclusion,
		Title: r.Output.Title, Summary: r.Output.Summary, Text: r.Output.Text, URL: r.HTMLURL}
}

func repoPath(r forge.Repo) string {
	return "/repos/" + url.PathEscape(r.Owner) + "/" + url.PathEscape(r.Name)
}

// do sends one request with GitHub's headers and decodes a 2xx answer into
// out (when not nil); any other answer is a *forge.Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	// path is escaped already (repoPath, escapeRef).
	target := c.base.String() + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", APIVersion)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", "gigafactory-fleet")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &forge.Error{Kind: forge.KindTransient, Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return &forge.Error{Kind: forge.KindTransient, Status: resp.StatusCode, Err: err}
	}
	if resp.StatusCode/100 != 2 {
		return statusError(resp, raw, c.now())
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &forge.Error{Kind: forge.KindTransient, Status: resp.StatusCode, Err: fmt.Errorf("decode %s %s: %w", method, path, err)}
	}
	return nil
}

// statusError classifies a non-2xx answer. GitHub's rate limits answer 403
// or 429 with x-ratelimit-remaining: 0 or retry-after; a secondary rate
// limit may carry neither, only a message saying so, and is then retried
// after at least a minute
// (docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api).
func statusError(resp *http.Response, raw []byte, now time.Time) *forge.Error {
	var msg struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &msg)
	e := &forge.Error{Status: resp.StatusCode, Message: bounded(msg.Message)}
	retryAfter := parseRetry(resp.Header, now)
	limited := resp.Header.Get("x-ratelimit-remaining") == "0" || resp.Header.Get("retry-after") != ""
	if !limited && strings.Contains(strings.ToLower(msg.Message), "secondary rate limit") {
		limited, retryAfter = true, max(retryAfter, secondaryLimitWait)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusForbidden && limited:
		e.Kind, e.RetryAfter = forge.KindRateLimited, retryAfter
	case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden:
		e.Kind = forge.KindAuth
	case resp.StatusCode == http.StatusNotFound:
		e.Kind = forge.KindNotFound
	case resp.StatusCode >= 500:
		e.Kind = forge.KindTransient
	default:
		e.Kind = forge.KindRefused
	}
	return e
}

// secondaryLimitWait is GitHub's "wait for at least one minute" after a
// secondary rate limit that names no time.
const secondaryLimitWait = time.Minute

// parseRetry reads retry-after (seconds) or x-ratelimit-reset (unix time).
func parseRetry(h http.Header, now time.Time) time.Duration {
	if s, err := strconv.Atoi(h.Get("retry-after")); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if reset, err := strconv.ParseInt(h.Get("x-ratelimit-reset"), 10, 64); err == nil {
		if d := time.Unix(reset, 0).Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// bounded makes a forge's message safe to keep and show.
func bounded(s string) string { return fleet.SanitizeText(s, 500) }
