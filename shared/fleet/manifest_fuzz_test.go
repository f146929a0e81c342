package fleet_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/fleet"
)

// FuzzParseManifest: whatever a client sends, ParseManifest never panics,
// rejects with a field-naming invalid_argument or too_large, and what it
// accepts is valid by every rule the rest of the system relies on.
func FuzzParseManifest(f *testing.F) {
	const maxSeed = 64 << 10 // the oversized cases would only slow the engine down
	for _, tt := range validManifests {
		if len(tt.src) <= maxSeed {
			f.Add([]byte(tt.src))
		}
	}
	for _, tt := range invalidManifests {
		if len(tt.src) <= maxSeed {
			f.Add([]byte(tt.src))
		}
	}
	f.Add([]byte("---\nrepo: r\nreview: {reviewers: [a, b], quorum: 1}\ncapabilities: [repo:r, os:linux]\n---\n# T\n"))
	f.Add([]byte("---\n&a repo: r\ntitle: !!str 12\nbudget: {wall: !!str 1h}\n---\nx"))

	f.Fuzz(func(t *testing.T, src []byte) {
		orig := bytes.Clone(src)
		m, err := fleet.ParseManifest(src)
		require.Equal(t, orig, src, "ParseManifest must not write to its input")

		if err != nil {
			require.Nil(t, m)
			var fe *fleet.Error
			require.True(t, errors.As(err, &fe), "not a *fleet.Error: %T %v", err, err)
			require.Contains(t, []fleet.Code{fleet.CodeInvalid, fleet.CodeTooLarge}, fe.Code, "%v", err)
			require.NotEmpty(t, fe.Field, "%v", err)
			require.NotEmpty(t, fe.Message, "%v", err)
			if len(src) > fleet.MaxManifestBytes {
				require.Equal(t, fleet.CodeTooLarge, fe.Code)
			}
			return
		}

		require.NotNil(t, m)
		require.LessOrEqual(t, len(src), fleet.MaxManifestBytes)
		require.NoError(t, fleet.ValidateName("repo", m.Repo))
		for _, c := range m.Capabilities {
			require.NoError(t, fleet.ValidateCapability("capabilities", c))
		}
		require.Len(t, dedupe(m.Capabilities), len(m.Capabilities), "capabilities hold no duplicates")
		require.True(t, bytes.HasSuffix(src, []byte(m.Body)), "the body is the input's tail, verbatim")
		require.True(t, utf8.ValidString(m.Body))
		require.NotEmpty(t, strings.TrimSpace(m.Body))
		require.NotEmpty(t, m.Title)
		require.NoError(t, fleet.ValidateText("title", m.Title, fleet.MaxTitleLen))
		if m.Persona != "" {
			require.NoError(t, fleet.ValidateName("persona", m.Persona))
		}
		if m.ParentID != "" {
			require.NoError(t, fleet.ValidateName("parentId", m.ParentID))
		}
		require.LessOrEqual(t, len(m.Deps), fleet.MaxDeps)
		for _, d := range m.Deps {
			require.NoError(t, fleet.ValidateName("deps", d))
		}
		p, perr := fleet.ParsePriority("priority", string(m.Priority))
		require.NoError(t, perr)
		require.Equal(t, m.Priority, p)
		require.NotEmpty(t, m.Priority)
		require.Contains(t, []fleet.DepsMode{fleet.DepsAll, fleet.DepsAny}, m.DepsMode)
		require.GreaterOrEqual(t, m.MaxAttempts, 1)
		require.LessOrEqual(t, m.MaxAttempts, 20)
		require.GreaterOrEqual(t, m.Budget.USD, 0.0)
		require.False(t, math.IsInf(m.Budget.USD, 0) || math.IsNaN(m.Budget.USD))
		require.GreaterOrEqual(t, m.Budget.Wall, fleet.Duration(0))
		if r := m.Review; r != nil {
			require.GreaterOrEqual(t, r.Quorum, 1)
			if len(r.Reviewers) > 0 {
				require.LessOrEqual(t, r.Quorum, len(r.Reviewers))
			}
			require.Len(t, dedupe(r.Reviewers), len(r.Reviewers))
		}

		// Parsing is deterministic.
		again, err := fleet.ParseManifest(src)
		require.NoError(t, err)
		require.Equal(t, m, again)

		// A job made from it can be stored: it has a JSON form that reads
		// back the same.
		j := fleet.Job{ID: "j1", ProductID: "p1", Title: m.Title, Repo: m.Repo, Capabilities: m.Capabilities,
			Persona: m.Persona, Priority: m.Priority, Stage: fleet.StageQueued, Body: m.Body,
			MaxAttempts: m.MaxAttempts, ParentID: m.ParentID, Deps: m.Deps, DepsMode: m.DepsMode,
			Budget: m.Budget, Review: m.Review, IdempotencyKey: m.IdempotencyKey}
		b, err := json.Marshal(j)
		require.NoError(t, err)
		var back fleet.Job
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, m.Body, back.Body)
		b2, err := json.Marshal(back)
		require.NoError(t, err)
		require.Equal(t, string(b), string(b2))
	})
}

func dedupe(s []string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, v := range s {
		m[v] = true
	}
	return m
}
