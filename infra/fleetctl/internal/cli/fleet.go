package cli

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

func (a *app) productsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "products", Aliases: []string{"product"}, Short: "Read and declare products and the repos they own"}
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show a product",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p fleet.ProductView
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/products/" + url.PathEscape(args[0])}, &p)
			if err != nil {
				return err
			}
			return a.printProduct(raw, &p)
		},
	}
	var name string
	var repos []string
	var move bool
	var maxRunning int
	var webhookURL, secretFile string
	put := &cobra.Command{
		Use:   "put ID [--repo R ...] [--name N] [--max-running N] [--webhook-url URL] [--secret-file F]",
		Short: "Declare a product: the repos it owns (the list replaces the old one), its name and seat cap",
		Long: `Declare a product. --repo replaces the list of repos it owns; --max-running caps
how many of its jobs run at once (0: uncapped). What a flag does not set is kept
from the product as it is (read first), so 'products put demo --max-running 2'
leaves demo's repos alone. --webhook-url and --secret-file set the tracker echo
target (the secret is read from a file, never a flag, and never shown again);
either alone keeps the other as it is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/products/" + url.PathEscape(args[0])
			f := cmd.Flags()
			var curURL string
			if !f.Changed("repo") || !f.Changed("name") || !f.Changed("max-running") || !f.Changed("webhook-url") {
				var cur fleet.ProductView
				_, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: path}, &cur)
				var ce *api.Error
				switch {
				case errors.As(err, &ce) && ce.Code == fleet.CodeNotFound: // a new product
				case err != nil:
					return err
				default:
					if !f.Changed("repo") {
						repos = cur.Repos
					}
					if !f.Changed("name") {
						name = cur.Name
					}
					if !f.Changed("max-running") {
						maxRunning = cur.MaxRunning
					}
					if cur.Tracker != nil {
						curURL = cur.Tracker.WebhookURL
					}
				}
			}
			if repos == nil {
				repos = []string{}
			}
			req := map[string]any{"name": name, "repos": repos, "moveRepos": move, "maxRunning": maxRunning}
			if f.Changed("webhook-url") || f.Changed("secret-file") {
				tracker, err := a.trackerTarget(webhookURL, curURL, secretFile)
				if err != nil {
					return err
				}
				req["tracker"] = tracker
			}
			body, err := jsonBody(req)
			if err != nil {
				return err
			}
			var p fleet.ProductView
			raw, err := a.call(cmd, api.Request{Method: http.MethodPut, Path: path, Body: body}, &p)
			if err != nil {
				return err
			}
			return a.printProduct(raw, &p)
		},
	}
	put.Flags().StringVar(&name, "name", "", "display name")
	put.Flags().StringSliceVar(&repos, "repo", nil, "a repo the product owns (repeat, or comma-separate)")
	put.Flags().BoolVar(&move, "move-repos", false, "take repos another product owns (unscoped operators only)")
	put.Flags().IntVar(&maxRunning, "max-running", 0, "at most this many of its jobs run at once (0: uncapped)")
	put.Flags().StringVar(&webhookURL, "webhook-url", "", "the tracker webhook every event of its tracked jobs is POSTed to")
	put.Flags().StringVar(&secretFile, "secret-file", "", "file holding the webhook signing secret (- for stdin)")
	cmd.AddCommand(get, put)
	return cmd
}

func (a *app) printProduct(raw []byte, p *fleet.ProductView) error {
	if a.json() {
		return a.printJSON(raw)
	}
	tracker := "-"
	if t := p.Tracker; t != nil {
		tracker = t.WebhookURL
		if t.SecretSet {
			tracker += " (secret set)"
		}
	}
	return a.fields([][2]string{{"id", p.ID}, {"name", orDash(p.Name)}, {"repos", list(p.Repos)},
		{"max running", seatCap(p.Product)}, {"tracker", tracker}, {"updated", a.ago(p.UpdatedAt) + " ago"}})
}

// trackerTarget is the tracker field of a product PUT: the URL given (or
// the one set), and the secret from its file when given (else the one set
// is kept).
func (a *app) trackerTarget(webhookURL, current, secretFile string) (map[string]any, error) {
	if webhookURL == "" {
		webhookURL = current
	}
	if webhookURL == "" {
		return nil, usagef("--webhook-url is required: the product has no tracker webhook yet")
	}
	t := map[string]any{"webhookUrl": webhookURL}
	if secretFile != "" {
		b, err := a.readInput(secretFile)
		if err != nil {
			return nil, err
		}
		t["secret"] = strings.TrimRight(string(b), "\r\n")
	}
	return t, nil
}

// seatCap is a product's seat cap as people read it.
func seatCap(p *fleet.Product) string {
	if !p.Capped() {
		return "uncapped"
	}
	return fmt.Sprintf("%d (%d running)", p.MaxRunning, p.Running())
}

func (a *app) reposCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "repos", Aliases: []string{"repo"}, Short: "Repos known to the fleet"}
	cmd.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "Repos, the product owning each and the factories that have it checked out",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var page api.Page[api.RepoInfo]
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/repos"}, &page)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			rows := make([][]string, 0, len(page.Items))
			for _, r := range page.Items {
				rows = append(rows, []string{r.Repo, list(r.Products), list(r.Factories)})
			}
			return a.table([]string{"REPO", "PRODUCTS", "FACTORIES"}, rows)
		},
	})
	return cmd
}

func (a *app) profilesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "profiles", Aliases: []string{"profile"}, Short: "Persona profiles (immutable versions)"}
	summaries := func(cmd *cobra.Command, path string) error {
		var page api.Page[api.ProfileSummary]
		raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: path}, &page)
		if err != nil {
			return err
		}
		if a.json() {
			return a.printJSON(raw)
		}
		rows := make([][]string, 0, len(page.Items))
		for _, p := range page.Items {
			rows = append(rows, []string{p.Name, strconv.FormatInt(p.Version, 10), list(p.Capabilities), orDash(p.Engine),
				strconv.Itoa(p.BodyBytes), orDash(p.CreatedBy), a.ago(p.CreatedAt)})
		}
		return a.table([]string{"NAME", "VERSION", "CAPABILITIES", "ENGINE", "BODY", "BY", "AGE"}, rows)
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "Every profile's latest version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := a.needProduct(); err != nil {
				return err
			}
			return summaries(cmd, "/profiles")
		},
	}
	versions := &cobra.Command{
		Use:   "versions NAME",
		Short: "Every version of a profile",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.needProduct(); err != nil {
				return err
			}
			return summaries(cmd, "/profiles/"+url.PathEscape(args[0])+"/versions")
		},
	}
	var version int64
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "A profile version with its instructions (latest unless --version)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.needProduct(); err != nil {
				return err
			}
			q := url.Values{}
			if version > 0 {
				q.Set("version", strconv.FormatInt(version, 10))
			}
			var p fleet.Profile
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/profiles/" + url.PathEscape(args[0]), Query: q}, &p)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			if err := a.fields([][2]string{{"name", p.Name}, {"version", strconv.FormatInt(p.Version, 10)},
				{"capabilities", list(p.Capabilities)}, {"engine", orDash(p.Engine)}, {"created", a.ago(p.CreatedAt) + " ago by " + orDash(p.CreatedBy)}}); err != nil {
				return err
			}
			// Another product's operator may have written the body: it is
			// printed as a log is, never commanding this terminal.
			a.printf("\n%s\n", stripEscapesKeepColour([]byte(p.Body)))
			return nil
		},
	}
	show.Flags().Int64Var(&version, "version", 0, "a given version")
	put := &cobra.Command{
		Use:   "put NAME FILE|-",
		Short: "Store a new version of a profile from a Markdown file (front matter: capabilities, engine, budget)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.needProduct(); err != nil {
				return err
			}
			body, err := a.readInput(args[1])
			if err != nil {
				return err
			}
			var p fleet.Profile
			raw, err := a.call(cmd, api.Request{Method: http.MethodPut, Path: "/profiles/" + url.PathEscape(args[0]), Body: body, ContentType: "text/markdown"}, &p)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			a.printf("profile %s version %d\n", p.Name, p.Version)
			return nil
		},
	}
	cmd.AddCommand(ls, versions, show, put)
	return cmd
}

func (a *app) getMetrics(cmd *cobra.Command) (*api.Metrics, []byte, error) {
	var m api.Metrics
	raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/metrics"}, &m)
	if err != nil {
		return nil, nil, err
	}
	return &m, raw, nil
}

func (a *app) metricsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "metrics",
		Short: "Fleet totals: factories, seats, jobs by stage, alerts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, raw, err := a.getMetrics(cmd)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			f := m.Factories
			health := make([]string, 0, len(f.ByHealth))
			for _, h := range slices.Sorted(maps.Keys(f.ByHealth)) {
				health = append(health, fmt.Sprintf("%s=%d", h, f.ByHealth[h]))
			}
			if err := a.fields([][2]string{
				{"factories", fmt.Sprintf("%d (%s)", f.Total, list(health))},
				{"seats", fmt.Sprintf("%d/%d used (%.0f%%)", f.Load, f.Seats, f.Utilization*100)},
				{"alerts", strconv.Itoa(len(m.Alerts))},
			}); err != nil {
				return err
			}
			a.printf("\n")
			var rows [][]string
			for _, st := range fleet.Stages {
				if n, ok := m.Jobs[string(st)]; ok {
					rows = append(rows, []string{string(st), strconv.Itoa(n)})
				}
			}
			return a.table([]string{"STAGE", "JOBS"}, rows)
		},
	}
}

func (a *app) alertsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "alerts",
		Short: "Failed and dead-lettered jobs (24 h), jobs no factory can run, starving jobs, stale factories, budgets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, _, err := a.getMetrics(cmd)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printValue(map[string]any{"items": m.Alerts})
			}
			rows := make([][]string, 0, len(m.Alerts))
			for _, al := range m.Alerts {
				rows = append(rows, []string{string(al.Severity), string(al.Kind), al.Subject, a.ago(al.Since), al.Message})
			}
			return a.table([]string{"SEVERITY", "KIND", "SUBJECT", "SINCE", "MESSAGE"}, rows)
		},
	}
}
