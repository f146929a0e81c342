package cli

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

func (a *app) factoriesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "factories", Aliases: []string{"factory"}, Short: "List, enroll and retire factories"}
	token := &cobra.Command{Use: "token", Short: "Rotate or revoke a factory's token"}
	token.AddCommand(a.factoryToken("rotate", "Issue a new token (the old one stops working)"),
		a.factoryToken("revoke", "Revoke the token: the factory can no longer call the API"))
	cmd.AddCommand(a.factoriesLs(), a.factoriesEnroll(), a.factoriesDeregister(), token,
		a.factoryDrain("drain", "Stop new assignments to a factory; it finishes the jobs it runs"),
		a.factoryDrain("undrain", "Put a drained factory back into service"))
	return cmd
}

func (a *app) completeFactories(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if err := a.setup(cmd, args); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var page api.Page[fleet.Factory]
	if _, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/factories"}, &page); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, f := range page.Items {
		out = append(out, f.ID+"\t"+string(f.Health))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func (a *app) factoriesLs() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "Every factory with health, seats, capabilities, repos and last heartbeat",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var page api.Page[fleet.Factory]
			raw, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/factories"}, &page)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			rows := make([][]string, 0, len(page.Items))
			for _, f := range page.Items {
				rows = append(rows, []string{f.ID, string(f.Kind), healthText(&f, a.env.Now()), fmt.Sprintf("%d/%d", f.Load, f.SeatLimit),
					list(f.Products), list(f.Capabilities), list(f.Repos), a.ago(f.LastHeartbeatAt)})
			}
			return a.table([]string{"ID", "KIND", "HEALTH", "SEATS", "PRODUCTS", "CAPABILITIES", "REPOS", "HEARTBEAT"}, rows)
		},
	}
}

func (a *app) factoriesEnroll() *cobra.Command {
	var kind string
	var products, caps []string
	var seats int
	var cost float64
	cmd := &cobra.Command{
		Use:   "enroll ID",
		Short: "Enroll a factory; prints its token, shown only this once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := jsonBody(map[string]any{"factoryId": args[0], "kind": kind, "products": products,
				"capabilities": caps, "seatLimit": seats, "costPerHourUsd": cost})
			if err != nil {
				return err
			}
			var e api.EnrollResponse
			raw, err := a.call(cmd, api.Request{Method: http.MethodPost, Path: "/factories/enroll", Body: body}, &e)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			a.printf("enrolled %s; its token (shown once):\n%s\n", e.FactoryID, e.Token)
			return nil
		},
	}
	cmd.Flags().StringVar(&kind, "kind", string(fleet.KindStatic), "static or elastic")
	cmd.Flags().StringSliceVar(&products, "products", nil, "products it serves (default: every product)")
	cmd.Flags().StringSliceVar(&caps, "capabilities", nil, "capabilities, e.g. os:linux,engine:claude")
	cmd.Flags().IntVar(&seats, "seats", 1, "how many jobs it runs at once")
	cmd.Flags().Float64Var(&cost, "cost-per-hour", 0, "USD per hour, for cost-aware routing")
	_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions([]string{string(fleet.KindStatic), string(fleet.KindElastic)}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (a *app) factoriesDeregister() *cobra.Command {
	return &cobra.Command{
		Use:               "deregister ID",
		Short:             "Remove a factory and revoke its token",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeFactories,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := a.call(cmd, api.Request{Method: http.MethodDelete, Path: "/factories/" + url.PathEscape(args[0])}, nil); err != nil {
				return err
			}
			if a.json() {
				return a.printValue(map[string]any{"factoryId": args[0], "deregistered": true})
			}
			a.printf("deregistered %s\n", args[0])
			return nil
		},
	}
}

func (a *app) factoryToken(op, short string) *cobra.Command {
	return &cobra.Command{
		Use:               op + " ID",
		Short:             short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeFactories,
		RunE: func(cmd *cobra.Command, args []string) error {
			var t api.TokenResponse
			raw, err := a.call(cmd, api.Request{Method: http.MethodPost, Path: "/factories/" + url.PathEscape(args[0]) + "/token/" + op}, &t)
			if err != nil {
				return err
			}
			switch {
			case a.json() && op == "revoke":
				return a.printValue(map[string]any{"factoryId": args[0], "revoked": true})
			case a.json():
				return a.printJSON(raw)
			case op == "revoke":
				a.printf("revoked the token of %s\n", args[0])
			default:
				a.printf("new token of %s (shown once):\n%s\n", t.FactoryID, t.Token)
			}
			return nil
		},
	}
}

// healthText is a factory's health, with "draining" when it is drained
// and "cooling:<engine>" for each engine its account is rate-limited on.
func healthText(f *fleet.Factory, now time.Time) string {
	s := string(f.Health)
	if f.Draining {
		s += ",draining"
	}
	for _, c := range slices.Sorted(maps.Keys(f.Cooldowns)) {
		if until, ok := f.CoolingFor(c, now); ok {
			s += ",cooling:" + strings.TrimPrefix(c, "engine:") + "(" + until.Sub(now).Round(time.Second).String() + ")"
		}
	}
	return s
}

// factoryDrain is `factories drain ID` or `factories undrain ID`.
func (a *app) factoryDrain(op, short string) *cobra.Command {
	return &cobra.Command{
		Use:               op + " ID",
		Short:             short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeFactories,
		RunE: func(cmd *cobra.Command, args []string) error {
			var f fleet.Factory
			raw, err := a.call(cmd, api.Request{Method: http.MethodPost, Path: "/factories/" + url.PathEscape(args[0]) + "/" + op}, &f)
			if err != nil {
				return err
			}
			if a.json() {
				return a.printJSON(raw)
			}
			if f.Draining {
				a.printf("%s is draining: no new jobs; the jobs it runs finish (load %d)\n", f.ID, f.Load)
			} else {
				a.printf("%s takes new jobs again\n", f.ID)
			}
			return nil
		},
	}
}
