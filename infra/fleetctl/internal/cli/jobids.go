package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

var (
	// fullJobID is a whole job id as the coordinator makes them: a job's
	// (j, 13 hex digits of clock, 16 random) or a child's (k, 24 hex).
	fullJobID = regexp.MustCompile(`^(j[0-9a-f]{29}|k[0-9a-f]{24})$`)
	// jobIDPrefix is what may abbreviate one.
	jobIDPrefix = regexp.MustCompile(`^[jk][0-9a-f]{0,28}$`)
)

// minJobPrefix is the shortest abbreviation looked up: a shorter one would
// match most of a product's jobs.
const minJobPrefix = 4

// takesJob makes c's first argument a job id that may be abbreviated, as
// git abbreviates commits: a unique prefix of one of the product's job ids
// stands for it. The id is resolved before c runs (cobra hands PreRunE
// and RunE the same argument slice).
func (a *app) takesJob(c *cobra.Command) *cobra.Command {
	c.PreRunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		id, err := a.resolveJob(cmd, args[0])
		if err != nil {
			return err
		}
		args[0] = id
		return nil
	}
	if c.ValidArgsFunction == nil {
		c.ValidArgsFunction = a.completeJobs
	}
	return c
}

// resolveJob returns the job id arg stands for: arg itself when it is a
// whole id (or cannot abbreviate one, for the server to judge), else the
// one job of the product whose id begins with it.
func (a *app) resolveJob(cmd *cobra.Command, arg string) (string, error) {
	if fullJobID.MatchString(arg) || !jobIDPrefix.MatchString(arg) || len(arg) < minJobPrefix || a.product == "" || a.token == "" {
		return arg, nil
	}
	var matches []string
	q := url.Values{"limit": {"500"}}
	for {
		var page api.Page[fleet.Job]
		if _, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs", Query: q}, &page); err != nil {
			return "", err
		}
		done := page.Cursor == ""
		for _, j := range page.Items {
			if strings.HasPrefix(j.ID, arg) {
				matches = append(matches, j.ID)
			} else if j.ID < arg {
				// Jobs list in descending id order: every id after this
				// one sorts below the prefix too.
				done = true
				break
			}
		}
		if done || len(matches) > 1 {
			break
		}
		q.Set("cursor", page.Cursor)
	}
	switch len(matches) {
	case 0:
		return "", &api.Error{Code: fleet.CodeNotFound, Message: fmt.Sprintf("no job of product %s has an id beginning with %s", a.product, arg)}
	case 1:
		return matches[0], nil
	}
	return "", &api.Error{Code: fleet.CodeInvalid, Message: fmt.Sprintf("job id %s is ambiguous: %s, %s and maybe more begin with it (give more of it)", arg, matches[0], matches[1])}
}
