package fleet_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// apiExample is the manifest of /work/shared/API.md, verbatim.
const apiExample = `---
title: Fix the login redirect
repo: learning_ai_notes          # routing target; must be owned by the product
capabilities: [os:linux, engine:claude, has:git]
persona: backend                 # a profile name
priority: normal                 # low | normal | high | critical
budget: {wall: 45m, usd: 5}
deps: []                         # job ids that must ship first
idempotencyKey: tracker-4711     # same key again -> same job, 200 instead of 201
---
Task body in Markdown, kept verbatim.
`

// manifest builds a manifest from front matter lines and a body.
func manifest(body string, front ...string) string {
	return "---\n" + strings.Join(front, "\n") + "\n---\n" + body
}

// defaults is a parsed manifest as the parser fills it in when the front
// matter says only repo and title.
func defaults(mods ...func(*fleet.Manifest)) *fleet.Manifest {
	m := &fleet.Manifest{
		Title: "T", Repo: "r", Capabilities: []string{}, Priority: fleet.PriorityNormal,
		Deps: []string{}, DepsMode: fleet.DepsAll, MaxAttempts: fleet.DefaultMaxAttempts, Body: "Do it.\n",
	}
	for _, f := range mods {
		f(m)
	}
	return m
}

var (
	longHeading = strings.Repeat("x", 150)
	wideHeading = strings.Repeat("日本語", 50) // 150 characters, 450 bytes
	hugeBody    = strings.Repeat("word ", fleet.MaxManifestBytes/5)
)

type validManifest struct {
	name string
	src  string
	want *fleet.Manifest
}

var validManifests = []validManifest{
	{"API.md example", apiExample, &fleet.Manifest{
		Title: "Fix the login redirect", Repo: "learning_ai_notes",
		Capabilities: []string{"os:linux", "engine:claude", "has:git"}, Persona: "backend",
		Priority: fleet.PriorityNormal, Budget: fleet.Budget{Wall: fleet.Duration(45 * time.Minute), USD: 5},
		Deps: []string{}, DepsMode: fleet.DepsAll, IdempotencyKey: "tracker-4711",
		MaxAttempts: 3, Body: "Task body in Markdown, kept verbatim.\n",
	}},
	{"minimal", "---\nrepo: r\n---\n# Do it\n",
		defaults(func(m *fleet.Manifest) { m.Title, m.Body = "Do it", "# Do it\n" })},
	{"CRLF line endings", "---\r\nrepo: r\r\ntitle: T\r\ncapabilities: [os:linux]\r\n---\r\nline one\r\nline two\r\n",
		defaults(func(m *fleet.Manifest) {
			m.Capabilities, m.Body = []string{"os:linux"}, "line one\r\nline two\r\n"
		})},
	{"CRLF, title from body", "---\r\nrepo: r\r\n---\r\n\r\n# Heading\r\nmore\r\n",
		defaults(func(m *fleet.Manifest) { m.Title, m.Body = "Heading", "\r\n# Heading\r\nmore\r\n" })},
	{"body verbatim: leading blank lines, indentation, trailing whitespace",
		manifest("\n\n  indented first\n\ttabbed  \ntrailing   \n\n\n", "repo: r", "title: T"),
		defaults(func(m *fleet.Manifest) { m.Body = "\n\n  indented first\n\ttabbed  \ntrailing   \n\n\n" })},
	{"body without final newline", manifest("no newline", "repo: r", "title: T"),
		defaults(func(m *fleet.Manifest) { m.Body = "no newline" })},
	{"body holding more --- lines and front matter lookalikes",
		manifest("---\nrepo: other\n---\n", "repo: r", "title: T"),
		defaults(func(m *fleet.Manifest) { m.Body = "---\nrepo: other\n---\n" })},
	{"body with unicode and markdown", manifest("# Ünïcødé 🚀\n\n- [ ] ✓ 日本語\n```go\nfmt.Println()\n```\n", "repo: r"),
		defaults(func(m *fleet.Manifest) {
			m.Title, m.Body = "Ünïcødé 🚀", "# Ünïcødé 🚀\n\n- [ ] ✓ 日本語\n```go\nfmt.Println()\n```\n"
		})},
	{"closing marker with trailing blanks", "---\nrepo: r\ntitle: T\n---  \t\nDo it.\n", defaults()},
	{"opening marker with trailing CR and blanks", "--- \r\nrepo: r\ntitle: T\n---\nDo it.\n", defaults()},
	{"title defaults to the first heading", manifest("\n\n## Fix the thing  \n\nmore\n", "repo: r"),
		defaults(func(m *fleet.Manifest) { m.Title, m.Body = "Fix the thing", "\n\n## Fix the thing  \n\nmore\n" })},
	{"title defaults to the first line when there is no heading", manifest("  plain first line\n# later\n", "repo: r"),
		defaults(func(m *fleet.Manifest) { m.Title, m.Body = "plain first line", "  plain first line\n# later\n" })},
	{"empty heading skipped", manifest("#\n###   \n# Real\n", "repo: r"),
		defaults(func(m *fleet.Manifest) { m.Title, m.Body = "Real", "#\n###   \n# Real\n" })},
	{"default title cut at 120 characters", manifest("# "+longHeading+"\n", "repo: r"),
		defaults(func(m *fleet.Manifest) { m.Title, m.Body = longHeading[:120], "# "+longHeading+"\n" })},
	{"default title cut within the byte limit", manifest("# "+wideHeading+"\n", "repo: r"),
		defaults(func(m *fleet.Manifest) {
			m.Title, m.Body = strings.Repeat("日本語", 33)+"日", "# "+wideHeading+"\n"
		})},
	{"explicit title wins over the heading", manifest("# Heading\n", "repo: r", "title: Explicit"),
		defaults(func(m *fleet.Manifest) { m.Title, m.Body = "Explicit", "# Heading\n" })},
	{"null title defaults too", manifest("# Heading\n", "repo: r", "title: ~"),
		defaults(func(m *fleet.Manifest) { m.Title, m.Body = "Heading", "# Heading\n" })},
	{"everything set", manifest("Do it.\n",
		"title: 'Quoted: title'", "repo: my-repo.v2", "capabilities:", "  - os:linux", "  - repo:my-repo.v2",
		"persona: backend", "priority: critical", "budget:", "  wall: 1h30m", "  usd: 12.5",
		"deps: [job-1, job_2]", "depsMode: any", "idempotencyKey: key with spaces/and:colons",
		"parentId: job-0", "review: {reviewers: [ann, bob, cy], quorum: 2}", "maxAttempts: 5"),
		&fleet.Manifest{
			Title: "Quoted: title", Repo: "my-repo.v2", Capabilities: []string{"os:linux", "repo:my-repo.v2"},
			Persona: "backend", Priority: fleet.PriorityCritical,
			Budget: fleet.Budget{Wall: fleet.Duration(90 * time.Minute), USD: 12.5},
			Deps:   []string{"job-1", "job_2"}, DepsMode: fleet.DepsAny, IdempotencyKey: "key with spaces/and:colons",
			ParentID: "job-0", Review: &fleet.Review{Reviewers: []string{"ann", "bob", "cy"}, Quorum: 2, OnReject: fleet.RejectRequeue},
			MaxAttempts: 5, Body: "Do it.\n",
		}},
	{"each priority: low", manifest("Do it.\n", "repo: r", "title: T", "priority: low"),
		defaults(func(m *fleet.Manifest) { m.Priority = fleet.PriorityLow })},
	{"each priority: high", manifest("Do it.\n", "repo: r", "title: T", "priority: high"),
		defaults(func(m *fleet.Manifest) { m.Priority = fleet.PriorityHigh })},
	{"empty priority means normal", manifest("Do it.\n", "repo: r", "title: T", `priority: ""`), defaults()},
	{"depsMode all", manifest("Do it.\n", "repo: r", "title: T", "depsMode: all"), defaults()},
	{"duplicate capabilities dropped, order kept",
		manifest("Do it.\n", "repo: r", "title: T", "capabilities: [has:git, os:linux, has:git]"),
		defaults(func(m *fleet.Manifest) { m.Capabilities = []string{"has:git", "os:linux"} })},
	{"capabilities in block style", manifest("Do it.\n", "repo: r", "title: T", "capabilities:", "- os:linux"),
		defaults(func(m *fleet.Manifest) { m.Capabilities = []string{"os:linux"} })},
	{"maxAttempts lower bound", manifest("Do it.\n", "repo: r", "title: T", "maxAttempts: 1"),
		defaults(func(m *fleet.Manifest) { m.MaxAttempts = 1 })},
	{"maxAttempts upper bound", manifest("Do it.\n", "repo: r", "title: T", "maxAttempts: 20"),
		defaults(func(m *fleet.Manifest) { m.MaxAttempts = 20 })},
	{"review quorum defaults to the number of reviewers",
		manifest("Do it.\n", "repo: r", "title: T", "review: {reviewers: [ann, bob, cy]}"),
		defaults(func(m *fleet.Manifest) {
			m.Review = &fleet.Review{Reviewers: []string{"ann", "bob", "cy"}, Quorum: 3, OnReject: fleet.RejectRequeue}
		})},
	{"review quorum 0 means the default",
		manifest("Do it.\n", "repo: r", "title: T", "review: {reviewers: [ann, bob], quorum: 0}"),
		defaults(func(m *fleet.Manifest) {
			m.Review = &fleet.Review{Reviewers: []string{"ann", "bob"}, Quorum: 2, OnReject: fleet.RejectRequeue}
		})},
	{"review quorum equal to reviewers",
		manifest("Do it.\n", "repo: r", "title: T", "review: {reviewers: [ann, bob], quorum: 2}"),
		defaults(func(m *fleet.Manifest) {
			m.Review = &fleet.Review{Reviewers: []string{"ann", "bob"}, Quorum: 2, OnReject: fleet.RejectRequeue}
		})},
	{"review without reviewers needs one approval",
		manifest("Do it.\n", "repo: r", "title: T", "review: {}"),
		defaults(func(m *fleet.Manifest) { m.Review = &fleet.Review{Quorum: 1, OnReject: fleet.RejectRequeue} })},
	{"review onReject fail", manifest("Do it.\n", "repo: r", "title: T", "review: {reviewers: [ann], onReject: fail}"),
		defaults(func(m *fleet.Manifest) {
			m.Review = &fleet.Review{Reviewers: []string{"ann"}, Quorum: 1, OnReject: fleet.RejectFail}
		})},
	{"kind composite", manifest("Do it.\n", "repo: r", "title: T", "kind: composite"),
		defaults(func(m *fleet.Manifest) { m.Kind = fleet.KindComposite })},
	{"kind task is the default", manifest("Do it.\n", "repo: r", "title: T", "kind: task"), defaults()},
	{"budget usd zero and integer wall", manifest("Do it.\n", "repo: r", "title: T", "budget: {usd: 0, wall: 2h}"),
		defaults(func(m *fleet.Manifest) { m.Budget = fleet.Budget{Wall: fleet.Duration(2 * time.Hour)} })},
	{"quoted keys", manifest("Do it.\n", `"repo": r`, `'title': T`), defaults()},
	{"comments and blank lines in front matter", manifest("Do it.\n", "# a comment", "", "repo: r # trailing", "title: T"), defaults()},
	{"repo of 100 characters", manifest("Do it.\n", "repo: "+strings.Repeat("a", 100), "title: T"),
		defaults(func(m *fleet.Manifest) { m.Repo = strings.Repeat("a", 100) })},
	{"exactly the size limit",
		manifest("Do it.\n"+hugeBody[:fleet.MaxManifestBytes-len(manifest("Do it.\n", "repo: r", "title: T"))], "repo: r", "title: T"),
		defaults(func(m *fleet.Manifest) {
			m.Body = "Do it.\n" + hugeBody[:fleet.MaxManifestBytes-len(manifest("Do it.\n", "repo: r", "title: T"))]
		})},
}

func TestParseManifestValid(t *testing.T) {
	t.Parallel()
	for _, tt := range validManifests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.LessOrEqual(t, len(tt.src), fleet.MaxManifestBytes)
			m, err := fleet.ParseManifest([]byte(tt.src))
			require.NoError(t, err)
			require.Equal(t, tt.want, m)
			require.True(t, strings.HasSuffix(tt.src, m.Body), "the body is the input's tail, byte for byte")
		})
	}
}

type invalidManifest struct {
	name  string
	src   string
	code  fleet.Code
	field string
}

var invalidManifests = []invalidManifest{
	// framing
	{"empty input", "", fleet.CodeInvalid, "manifest"},
	{"no opening ---", "repo: r\n---\nDo it.\n", fleet.CodeInvalid, "manifest"},
	{"blank line before the opening ---", "\n---\nrepo: r\n---\nDo it.\n", fleet.CodeInvalid, "manifest"},
	{"indented opening ---", " ---\nrepo: r\n---\nDo it.\n", fleet.CodeInvalid, "manifest"},
	{"byte order mark before ---", "\ufeff---\nrepo: r\n---\nDo it.\n", fleet.CodeInvalid, "manifest"},
	{"opening --- alone without newline", "---", fleet.CodeInvalid, "manifest"},
	{"opening ---- too long", "----\nrepo: r\n----\nDo it.\n", fleet.CodeInvalid, "manifest"},
	{"unclosed front matter", "---\nrepo: r\ntitle: T\nDo it.\n", fleet.CodeInvalid, "manifest"},
	{"only the opening line", "---\n", fleet.CodeInvalid, "manifest"},
	{"indented closing --- does not close", "---\nrepo: r\n  ---\nDo it.\n", fleet.CodeInvalid, "manifest"},
	// YAML shape
	{"invalid YAML", manifest("Do it.\n", "repo: [r", "title: T"), fleet.CodeInvalid, "manifest"},
	{"tab indentation", manifest("Do it.\n", "budget:", "\twall: 1h", "repo: r"), fleet.CodeInvalid, "manifest"},
	{"raw control character in YAML", manifest("Do it.\n", "repo: r\x01", "title: T"), fleet.CodeInvalid, "manifest"},
	{"front matter is a list", manifest("Do it.\n", "- repo: r", "- title: T"), fleet.CodeInvalid, "manifest"},
	{"front matter is a scalar", manifest("Do it.\n", "just words"), fleet.CodeInvalid, "manifest"},
	{"front matter is an alias", manifest("Do it.\n", "*a"), fleet.CodeInvalid, "manifest"},
	{"second YAML document after ...", manifest("Do it.\n", "repo: r", "title: T", "...", "foo: bar"), fleet.CodeInvalid, "manifest"},
	{"second YAML document on a --- line", manifest("Do it.\n", "repo: r", "--- {foo: bar}"), fleet.CodeInvalid, "manifest"},
	{"empty field name", manifest("Do it.\n", "repo: r", `"": x`), fleet.CodeInvalid, "manifest"},
	{"list as field name", manifest("Do it.\n", "repo: r", "? [a, b]", ": x"), fleet.CodeInvalid, "manifest"},
	{"empty front matter", manifest("Do it.\n", ""), fleet.CodeInvalid, "repo"},
	{"comment-only front matter", manifest("Do it.\n", "# nothing"), fleet.CodeInvalid, "repo"},
	// fields
	{"unknown field foo", manifest("Do it.\n", "repo: r", "foo: bar"), fleet.CodeInvalid, "foo"},
	{"field name in the wrong case", manifest("Do it.\n", "Repo: r"), fleet.CodeInvalid, "Repo"},
	{"snake_case field name", manifest("Do it.\n", "repo: r", "max_attempts: 3"), fleet.CodeInvalid, "max_attempts"},
	{"merge key", manifest("Do it.\n", "repo: r", "<<: {title: T}"), fleet.CodeInvalid, "<<"},
	{"duplicated key", manifest("Do it.\n", "repo: r", "title: T", "repo: s"), fleet.CodeInvalid, "repo"},
	{"duplicated key, quoted", manifest("Do it.\n", "repo: r", `"repo": r`), fleet.CodeInvalid, "repo"},
	{"missing repo", manifest("Do it.\n", "title: T"), fleet.CodeInvalid, "repo"},
	{"null repo", manifest("Do it.\n", "repo: ~", "title: T"), fleet.CodeInvalid, "repo"},
	{"repo ../x", manifest("Do it.\n", "repo: ../x"), fleet.CodeInvalid, "repo"},
	{"repo -rf", manifest("Do it.\n", "repo: -rf"), fleet.CodeInvalid, "repo"},
	{"repo .git", manifest("Do it.\n", "repo: .git"), fleet.CodeInvalid, "repo"},
	{"repo with a control character", manifest("Do it.\n", `repo: "a\x01b"`), fleet.CodeInvalid, "repo"},
	{"repo with a newline", manifest("Do it.\n", `repo: "a\nb"`), fleet.CodeInvalid, "repo"},
	{"repo with a slash", manifest("Do it.\n", "repo: org/repo"), fleet.CodeInvalid, "repo"},
	{"repo with a space", manifest("Do it.\n", "repo: 'my repo'"), fleet.CodeInvalid, "repo"},
	{"repo with unicode", manifest("Do it.\n", "repo: répo"), fleet.CodeInvalid, "repo"},
	{"repo of 101 characters", manifest("Do it.\n", "repo: "+strings.Repeat("a", 101)), fleet.CodeInvalid, "repo"},
	{"repo is a list", manifest("Do it.\n", "repo: [a, b]"), fleet.CodeInvalid, "repo"},
	{"repo is an alias", manifest("Do it.\n", "title: &t T", "repo: *t"), fleet.CodeInvalid, "repo"},
	{"capability build", manifest("Do it.\n", "repo: r", "capabilities: [build]"), fleet.CodeInvalid, "capabilities[0]"},
	{"capability with an empty value", manifest("Do it.\n", "repo: r", `capabilities: [os:linux, "os:"]`), fleet.CodeInvalid, "capabilities[1]"},
	{"capability with an empty kind", manifest("Do it.\n", "repo: r", `capabilities: [":linux"]`), fleet.CodeInvalid, "capabilities[0]"},
	{"capability kind in upper case", manifest("Do it.\n", "repo: r", "capabilities: [OS:linux]"), fleet.CodeInvalid, "capabilities[0]"},
	{"capability repo:../x", manifest("Do it.\n", "repo: r", "capabilities: [os:linux, has:git, repo:../x]"), fleet.CodeInvalid, "capabilities[2]"},
	{"capability with a zero-width space", manifest("Do it.\n", "repo: r", `capabilities: ["os:linux\u200b"]`), fleet.CodeInvalid, "capabilities[0]"},
	{"capability is a mapping", manifest("Do it.\n", "repo: r", "capabilities: [{os: linux}]"), fleet.CodeInvalid, "capabilities[0]"},
	{"capabilities not a list", manifest("Do it.\n", "repo: r", "capabilities: os:linux"), fleet.CodeInvalid, "capabilities"},
	{"capabilities a mapping", manifest("Do it.\n", "repo: r", "capabilities: {os: linux}"), fleet.CodeInvalid, "capabilities"},
	{"too many capabilities", manifest("Do it.\n", "repo: r", "capabilities: ["+manyCaps(fleet.MaxCapabilities+1)+"]"), fleet.CodeInvalid, "capabilities"},
	{"bad priority", manifest("Do it.\n", "repo: r", "priority: urgent"), fleet.CodeInvalid, "priority"},
	{"priority in upper case", manifest("Do it.\n", "repo: r", "priority: HIGH"), fleet.CodeInvalid, "priority"},
	{"priority a list", manifest("Do it.\n", "repo: r", "priority: [high]"), fleet.CodeInvalid, "priority"},
	{"bad depsMode", manifest("Do it.\n", "repo: r", "depsMode: some"), fleet.CodeInvalid, "depsMode"},
	{"budget.wall soon", manifest("Do it.\n", "repo: r", "budget: {wall: soon}"), fleet.CodeInvalid, "budget.wall"},
	{"budget.wall without unit", manifest("Do it.\n", "repo: r", "budget: {wall: 45}"), fleet.CodeInvalid, "budget.wall"},
	{"budget.wall zero", manifest("Do it.\n", "repo: r", "budget: {wall: 0s}"), fleet.CodeInvalid, "budget.wall"},
	{"budget.wall negative", manifest("Do it.\n", "repo: r", "budget: {wall: -5m}"), fleet.CodeInvalid, "budget.wall"},
	{"negative budget.usd", manifest("Do it.\n", "repo: r", "budget: {usd: -1}"), fleet.CodeInvalid, "budget.usd"},
	{"budget.usd not a number", manifest("Do it.\n", "repo: r", "budget: {usd: five}"), fleet.CodeInvalid, "budget.usd"},
	{"budget.usd NaN", manifest("Do it.\n", "repo: r", "budget: {usd: .nan}"), fleet.CodeInvalid, "budget.usd"},
	{"budget.usd infinite", manifest("Do it.\n", "repo: r", "budget: {usd: .inf}"), fleet.CodeInvalid, "budget.usd"},
	{"unknown budget field", manifest("Do it.\n", "repo: r", "budget: {x: 1}"), fleet.CodeInvalid, "budget.x"},
	{"duplicated budget field", manifest("Do it.\n", "repo: r", "budget: {usd: 1, usd: 2}"), fleet.CodeInvalid, "budget.usd"},
	{"budget not a mapping", manifest("Do it.\n", "repo: r", "budget: 5"), fleet.CodeInvalid, "budget"},
	{"empty field name in budget", manifest("Do it.\n", "repo: r", `budget: {"": 1}`), fleet.CodeInvalid, "budget"},
	{"empty body", manifest("", "repo: r", "title: T"), fleet.CodeInvalid, "body"},
	{"empty body, no title", manifest("", "repo: r"), fleet.CodeInvalid, "body"},
	{"whitespace-only body", manifest("\n \t\r\n\n", "repo: r", "title: T"), fleet.CodeInvalid, "body"},
	{"closing --- is the last line", "---\nrepo: r\ntitle: T\n---", fleet.CodeInvalid, "body"},
	{"body not UTF-8", manifest("Do it \xff\xfe.\n", "repo: r", "title: T"), fleet.CodeInvalid, "body"},
	{"title with a control character", manifest("Do it.\n", "repo: r", `title: "bell\a"`), fleet.CodeInvalid, "title"},
	{"title too long", manifest("Do it.\n", "repo: r", "title: "+strings.Repeat("t", fleet.MaxTitleLen+1)), fleet.CodeInvalid, "title"},
	{"title a mapping", manifest("Do it.\n", "repo: r", "title: {a: b}"), fleet.CodeInvalid, "title"},
	{"title from a body line with a control character", manifest("# a\x00b\n", "repo: r"), fleet.CodeInvalid, "title"},
	{"maxAttempts 0", manifest("Do it.\n", "repo: r", "maxAttempts: 0"), fleet.CodeInvalid, "maxAttempts"},
	{"maxAttempts 99", manifest("Do it.\n", "repo: r", "maxAttempts: 99"), fleet.CodeInvalid, "maxAttempts"},
	{"maxAttempts 21", manifest("Do it.\n", "repo: r", "maxAttempts: 21"), fleet.CodeInvalid, "maxAttempts"},
	{"maxAttempts negative", manifest("Do it.\n", "repo: r", "maxAttempts: -1"), fleet.CodeInvalid, "maxAttempts"},
	{"maxAttempts fractional", manifest("Do it.\n", "repo: r", "maxAttempts: 2.5"), fleet.CodeInvalid, "maxAttempts"},
	{"maxAttempts a word", manifest("Do it.\n", "repo: r", "maxAttempts: three"), fleet.CodeInvalid, "maxAttempts"},
	{"maxAttempts overflowing", manifest("Do it.\n", "repo: r", "maxAttempts: 99999999999999999999"), fleet.CodeInvalid, "maxAttempts"},
	{"review quorum larger than reviewers", manifest("Do it.\n", "repo: r", "review: {reviewers: [ann, bob], quorum: 3}"), fleet.CodeInvalid, "review.quorum"},
	{"review quorum negative", manifest("Do it.\n", "repo: r", "review: {reviewers: [ann], quorum: -1}"), fleet.CodeInvalid, "review.quorum"},
	{"review quorum not a number", manifest("Do it.\n", "repo: r", "review: {quorum: all}"), fleet.CodeInvalid, "review.quorum"},
	{"review reviewer repeated", manifest("Do it.\n", "repo: r", "review: {reviewers: [ann, ann], quorum: 2}"), fleet.CodeInvalid, "review.reviewers[1]"},
	{"review reviewer empty", manifest("Do it.\n", "repo: r", `review: {reviewers: [""]}`), fleet.CodeInvalid, "review.reviewers[0]"},
	{"review reviewer too long", manifest("Do it.\n", "repo: r", "review: {reviewers: [ann, "+strings.Repeat("b", fleet.MaxNameLen+1)+"]}"), fleet.CodeInvalid, "review.reviewers[1]"},
	{"review unknown field", manifest("Do it.\n", "repo: r", "review: {approvers: [ann]}"), fleet.CodeInvalid, "review.approvers"},
	{"review onReject unknown", manifest("Do it.\n", "repo: r", "review: {onReject: retry}"), fleet.CodeInvalid, "review.onReject"},
	{"review onReject a list", manifest("Do it.\n", "repo: r", "review: {onReject: [fail]}"), fleet.CodeInvalid, "review.onReject"},
	{"review reviewer not a plain name", manifest("Do it.\n", "repo: r", "review: {reviewers: [ann, bob smith]}"), fleet.CodeInvalid, "review.reviewers[1]"},
	{"kind unknown", manifest("Do it.\n", "repo: r", "kind: epic"), fleet.CodeInvalid, "kind"},
	{"kind empty", manifest("Do it.\n", "repo: r", `kind: ""`), fleet.CodeInvalid, "kind"},
	{"kind in capitals", manifest("Do it.\n", "repo: r", "kind: Composite"), fleet.CodeInvalid, "kind"},
	{"kind a list", manifest("Do it.\n", "repo: r", "kind: [composite]"), fleet.CodeInvalid, "kind"},
	{"composite with a review gate", manifest("Do it.\n", "repo: r", "kind: composite", "review: {quorum: 1}"), fleet.CodeInvalid, "review"},
	{"review not a mapping", manifest("Do it.\n", "repo: r", "review: [ann]"), fleet.CodeInvalid, "review"},
	{"deps with a bad id", manifest("Do it.\n", "repo: r", "deps: [job-1, ../job-2]"), fleet.CodeInvalid, "deps[1]"},
	{"deps with an empty id", manifest("Do it.\n", "repo: r", `deps: [""]`), fleet.CodeInvalid, "deps[0]"},
	{"deps with a nested list", manifest("Do it.\n", "repo: r", "deps: [a, [b]]"), fleet.CodeInvalid, "deps[1]"},
	{"deps not a list", manifest("Do it.\n", "repo: r", "deps: job-1"), fleet.CodeInvalid, "deps"},
	{"too many deps", manifest("Do it.\n", "repo: r", "deps: ["+manyNames(fleet.MaxDeps+1)+"]"), fleet.CodeInvalid, "deps"},
	{"persona with a space", manifest("Do it.\n", "repo: r", "persona: back end"), fleet.CodeInvalid, "persona"},
	{"parentId with a slash", manifest("Do it.\n", "repo: r", "parentId: a/b"), fleet.CodeInvalid, "parentId"},
	{"idempotencyKey with a control character", manifest("Do it.\n", "repo: r", `idempotencyKey: "k\x1b[0m"`), fleet.CodeInvalid, "idempotencyKey"},
	{"idempotencyKey too long", manifest("Do it.\n", "repo: r", "idempotencyKey: "+strings.Repeat("k", 201)), fleet.CodeInvalid, "idempotencyKey"},
	// size
	{"manifest over 1 MiB", manifest("Do it.\n"+hugeBody+"x", "repo: r", "title: T"), fleet.CodeTooLarge, "manifest"},
	{"manifest one byte over the limit",
		manifest("Do it.\n"+hugeBody[:fleet.MaxManifestBytes-len(manifest("Do it.\n", "repo: r", "title: T"))+1], "repo: r", "title: T"),
		fleet.CodeTooLarge, "manifest"},
	{"oversized garbage is too large, not invalid", strings.Repeat("\x00", fleet.MaxManifestBytes+1), fleet.CodeTooLarge, "manifest"},
}

func manyCaps(n int) string {
	caps := make([]string, n)
	for i := range caps {
		caps[i] = fmt.Sprintf("has:tool%d", i)
	}
	return strings.Join(caps, ", ")
}

func manyNames(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("job-%d", i)
	}
	return strings.Join(names, ", ")
}

func TestParseManifestInvalid(t *testing.T) {
	t.Parallel()
	for _, tt := range invalidManifests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := fleet.ParseManifest([]byte(tt.src))
			require.Nil(t, m)
			var fe *fleet.Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.code, fe.Code, "%v", err)
			require.Equal(t, tt.field, fe.Field, "%v", err)
			require.NotEmpty(t, fe.Message)
			require.Equal(t, tt.code, fleet.CodeOf(err))
			if tt.code == fleet.CodeInvalid {
				require.ErrorIs(t, err, fleet.ErrInvalid)
			} else {
				require.ErrorIs(t, err, fleet.ErrTooLarge)
			}
			require.True(t, utf8.ValidString(fe.Error()) || !utf8.ValidString(tt.src), "error text stays printable")
		})
	}
}

// TestParseManifestSizeCheckedFirst: an oversized manifest is rejected for
// its size before anything is parsed, whatever else is wrong with it.
func TestParseManifestSizeCheckedFirst(t *testing.T) {
	t.Parallel()
	src := []byte(manifest(strings.Repeat("a", fleet.MaxManifestBytes), "repo: ../x", "foo: bar"))
	_, err := fleet.ParseManifest(src)
	require.True(t, errors.Is(err, fleet.ErrTooLarge), "%v", err)
}

// TestParseManifestDoesNotAliasInput: the parsed manifest owns its strings,
// so a caller reusing its buffer cannot change a job it already submitted.
func TestParseManifestDoesNotAliasInput(t *testing.T) {
	t.Parallel()
	src := []byte(manifest("Body text.\n", "repo: r", "title: T"))
	m, err := fleet.ParseManifest(src)
	require.NoError(t, err)
	for i := range src {
		src[i] = 'X'
	}
	require.Equal(t, "Body text.\n", m.Body)
	require.Equal(t, "r", m.Repo)
}
