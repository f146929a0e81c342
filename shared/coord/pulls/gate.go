package pulls

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gigafactory/fleet/shared/forge"
)

// maxWaitingShown bounds the checks a "waiting for" message names.
const maxWaitingShown = 5

// mergeGate decides whether autoMerge may merge a head, from every check run
// and commit status reported on it and the product's required checks. It
// says what it still waits for when it may not.
//
//   - Every check run must have completed green (success, neutral,
//     skipped) and every commit status must be success: a running or
//     failing one, of either kind, blocks.
//   - Every required name must be reported, as a check run's name or a
//     status's context, and (by the rule above) green.
//   - With no required checks and nothing reported at all, it waits for
//     at least one check or status. CI registers its checks some time
//     after the push; merging a head nothing has looked at yet would merge
//     before CI starts, and a product without CI can still be shipped by a
//     person. requiredChecks closes the race this leaves (a fast check
//     green before a slow one is registered), as GitHub's branch
//     protection does.
func mergeGate(required []string, checks []forge.Check, statuses []forge.Status) (ok bool, waitingFor string) {
	var waiting []string
	reported := map[string]bool{}
	for _, c := range checks {
		reported[c.Name] = true
		switch {
		case !c.Completed:
			waiting = append(waiting, fmt.Sprintf("check %s (running)", c.Name))
		case !c.Passed():
			waiting = append(waiting, fmt.Sprintf("check %s (%s)", c.Name, orUnknown(c.Conclusion)))
		}
	}
	for _, s := range statuses {
		reported[s.Context] = true
		if s.State != forge.StatusSuccess {
			waiting = append(waiting, fmt.Sprintf("status %s (%s)", s.Context, orUnknown(string(s.State))))
		}
	}
	for _, name := range required {
		if !reported[name] {
			waiting = append(waiting, fmt.Sprintf("required check %s (not reported)", name))
		}
	}
	if len(required) == 0 && len(checks) == 0 && len(statuses) == 0 {
		return false, "waiting for a check run or commit status to be reported on the head " +
			"(none is yet; forge.requiredChecks names the ones to wait for)"
	}
	if len(waiting) == 0 {
		return true, ""
	}
	waiting = slices.Compact(waiting)
	if n := len(waiting) - maxWaitingShown; n > 0 {
		waiting = append(waiting[:maxWaitingShown], fmt.Sprintf("%d more", n))
	}
	return false, "waiting for " + strings.Join(waiting, ", ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
