package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// artifactsCommand lists a job's artifacts and downloads one, checked
// against the sha256 its pointer document carries.
func (a *app) artifactsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "artifacts", Short: "A job's artifacts: engine logs, diffs, usage reports"}
	cmd.AddCommand(a.takesJob(a.artifactsLs()), a.artifactsGet())
	return cmd
}

func (a *app) artifactsLs() *cobra.Command {
	return &cobra.Command{
		Use:               "ls JOB",
		Short:             "List a job's artifacts",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var page api.Page[fleet.Artifact]
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(args[0]) + "/artifacts"}, &page)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			rows := make([][]string, 0, len(page.Items))
			for _, x := range page.Items {
				rows = append(rows, []string{x.ID, x.Name, string(x.Kind), strconv.FormatInt(x.Size, 10), shortHash(x.SHA256), orDash(x.RunID), a.ago(x.CreatedAt)})
			}
			return a.table([]string{"ID", "NAME", "KIND", "SIZE", "SHA256", "RUN", "CREATED"}, rows)
		},
	}
}

func (a *app) artifactsGet() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "get ID|JOB NAME [-o FILE]",
		Short: "Download an artifact (by its id, or by its job and name), checking its size and sha256",
		Long: `Download an artifact's bytes to FILE (default: stdout). Name it by its id (as
artifacts ls prints it) or by its job and name, e.g. 'artifacts get j01a2 diff.patch'
(the job id may be abbreviated; of several runs' artifacts of that name, the
newest). The bytes are checked against the size and sha256 of the artifact's
metadata before anything is written: a mismatch exits 1 and writes nothing.`,
		Args: cobra.RangeArgs(1, 2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return a.completeJobs(cmd, args, toComplete)
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var meta fleet.Artifact
			if len(args) == 2 {
				m, err := a.artifactByName(cmd, args[0], args[1])
				if err != nil {
					return err
				}
				meta = *m
			} else if _, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/artifacts/" + url.PathEscape(args[0])}, &meta); err != nil {
				return err
			}
			path := "/artifacts/" + url.PathEscape(meta.ID)
			if a.token == "" {
				return &api.Error{Code: fleet.CodeUnauthenticated, Message: "no operator token: set FLEET_TOKEN or --token-file"}
			}
			resp, err := a.client.Open(cmd.Context(), api.Request{Method: http.MethodGet, Path: path + "/content", Accept: "*/*"})
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			// Spooled to a temporary file (artifacts may be large) and
			// checked before it reaches FILE or stdout.
			dir := os.TempDir()
			if out != "" && out != "-" {
				dir = filepath.Dir(out)
			}
			tmp, err := os.CreateTemp(dir, ".fleetctl-artifact-*")
			if err != nil {
				return err
			}
			defer func() { _ = os.Remove(tmp.Name()) }()
			defer tmp.Close()
			h := sha256.New()
			n, err := io.Copy(io.MultiWriter(tmp, h), resp.Body)
			if err != nil {
				return &api.Error{Code: fleet.CodeUnavailable, Message: "reading the artifact: " + err.Error()}
			}
			if sum := hex.EncodeToString(h.Sum(nil)); n != meta.Size || sum != meta.SHA256 {
				return fmt.Errorf("artifact %s: got %d bytes with sha256 %s, its metadata says %d bytes with sha256 %s: nothing written",
					meta.ID, n, sum, meta.Size, meta.SHA256)
			}
			if out == "" || out == "-" {
				if _, err := tmp.Seek(0, io.SeekStart); err != nil {
					return err
				}
				_, err := io.Copy(a.env.Stdout, tmp)
				return err
			}
			if err := tmp.Close(); err != nil {
				return err
			}
			if err := os.Chmod(tmp.Name(), 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), out); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "%s: %d bytes, sha256 %s verified\n", out, n, meta.SHA256)
			return nil
		},
	}
	// Shadows the global -o/--output (table|json) on this command: here it
	// names where the bytes go, as curl's -o does.
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write the artifact to (default: stdout)")
	return cmd
}

// artifactByName finds the artifact of job (which may be abbreviated)
// called name: the newest, when several runs left one of that name.
func (a *app) artifactByName(cmd *cobra.Command, job, name string) (*fleet.Artifact, error) {
	id, err := a.resolveJob(cmd, job)
	if err != nil {
		return nil, err
	}
	var page api.Page[fleet.Artifact]
	if _, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/jobs/" + url.PathEscape(id) + "/artifacts"}, &page); err != nil {
		return nil, err
	}
	var found *fleet.Artifact
	var names []string
	for i := range page.Items {
		x := &page.Items[i]
		names = append(names, x.Name)
		if x.Name == name && (found == nil || x.CreatedAt.After(found.CreatedAt)) {
			found = x
		}
	}
	if found == nil {
		return nil, &api.Error{Code: fleet.CodeNotFound, Message: fmt.Sprintf("job %s has no artifact named %s (it has: %s)", id, name, list(slices.Compact(slices.Sorted(slices.Values(names)))))}
	}
	return found, nil
}

// shortHash is the first 12 hex digits of a sha256, as git shortens.
func shortHash(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
