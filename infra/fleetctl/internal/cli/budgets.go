package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// budgetsCommand reads and drives a product's budget (API.md, "Budgets").
// The product is the argument, else -p/--product or FLEET_PRODUCT.
func (a *app) budgetsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "budgets", Aliases: []string{"budget"}, Short: "A product's spending ceiling: show with burndown, set, pause, resume"}
	show := &cobra.Command{
		Use:               "show [PRODUCT]",
		Short:             "The budget (spent, reserved, remaining, pause) and its burndown with the forecast",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeProducts,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := a.budgetPath(args)
			if err != nil {
				return err
			}
			var b api.Budget
			rawB, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: path}, &b)
			if err != nil {
				return err
			}
			var bd api.Burndown
			rawD, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: path + "/burndown"}, &bd)
			if err != nil {
				return err
			}
			if a.json() {
				both, err := json.Marshal(map[string]json.RawMessage{"budget": rawB, "burndown": rawD})
				if err != nil {
					return err
				}
				return a.printJSON(both)
			}
			if err := a.printBudgetFields(&b); err != nil {
				return err
			}
			forecast := "not reached at this rate"
			if bd.ForecastExhaustedAt != nil {
				forecast = bd.ForecastExhaustedAt.UTC().Format("2006-01-02 15:04 UTC")
			}
			a.printf("\nburndown (forecast: ceiling reached %s)\n", forecast)
			rows := make([][]string, 0, len(bd.Points))
			for _, p := range bd.Points {
				rows = append(rows, []string{p.At.UTC().Format("2006-01-02 15:04:05"), usd(p.SpentUSD), percent(p.SpentUSD, bd.CeilingUSD)})
			}
			return a.table([]string{"AT", "SPENT", "OF CEILING"}, rows)
		},
	}
	var ceiling, alertAt, defaultJob float64
	var period string
	var autoPause bool
	set := &cobra.Command{
		Use:               "set [PRODUCT] --ceiling USD [--period month|total] [--alert-at F] [--auto-pause=false] [--default-job-usd USD]",
		Short:             "Set the budget; flags left out keep the budget's current values (or the defaults for a new one)",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeProducts,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := a.budgetPath(args)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			req := map[string]any{}
			var cur api.Budget
			_, err = a.call(cmd, api.Request{Method: http.MethodGet, Path: path}, &cur)
			var ce *api.Error
			switch {
			case errors.As(err, &ce) && ce.Code == fleet.CodeNotFound: // a new budget: the server's defaults
			case err != nil:
				return err
			default:
				req["ceilingUsd"], req["period"], req["alertAt"], req["autoPause"], req["defaultJobUsd"] =
					cur.CeilingUSD, cur.Period, cur.AlertAt, cur.AutoPause, cur.DefaultJobUSD
			}
			for flag, v := range map[string]any{"ceilingUsd": ceiling, "period": period, "alertAt": alertAt,
				"autoPause": autoPause, "defaultJobUsd": defaultJob} {
				if f.Changed(budgetFlags[flag]) {
					req[flag] = v
				}
			}
			if _, ok := req["ceilingUsd"]; !ok {
				return usagef("a new budget needs --ceiling")
			}
			body, err := jsonBody(req)
			if err != nil {
				return err
			}
			return a.budgetCall(cmd, http.MethodPut, path, body)
		},
	}
	set.Flags().Float64Var(&ceiling, "ceiling", 0, "the most the product may spend per period, USD")
	set.Flags().StringVar(&period, "period", "", "month (the calendar month, UTC) or total")
	set.Flags().Float64Var(&alertAt, "alert-at", 0, "alert at this fraction of the ceiling (0-1]")
	set.Flags().BoolVar(&autoPause, "auto-pause", true, "pause the product when spend reaches the ceiling")
	set.Flags().Float64Var(&defaultJob, "default-job-usd", 0, "the estimate reserved for a job without budget.usd")
	_ = set.RegisterFlagCompletionFunc("period", cobra.FixedCompletions([]string{string(fleet.PeriodMonth), string(fleet.PeriodTotal)}, cobra.ShellCompDirectiveNoFileComp))
	var reason string
	pause := &cobra.Command{
		Use:               "pause [PRODUCT] [--reason TEXT]",
		Short:             "Stop assigning the product's jobs (running jobs finish)",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeProducts,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := a.budgetPath(args)
			if err != nil {
				return err
			}
			body, err := jsonBody(map[string]any{"reason": reason})
			if err != nil {
				return err
			}
			return a.budgetCall(cmd, http.MethodPost, path+"/pause", body)
		},
	}
	pause.Flags().StringVar(&reason, "reason", "", "why, for people")
	resume := &cobra.Command{
		Use:               "resume [PRODUCT]",
		Short:             "Lift a pause: held jobs flow at once (while the ceiling leaves room)",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeProducts,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := a.budgetPath(args)
			if err != nil {
				return err
			}
			return a.budgetCall(cmd, http.MethodPost, path+"/resume", nil)
		},
	}
	cmd.AddCommand(show, set, pause, resume)
	return cmd
}

// budgetFlags names the set flag of each field of a budget PUT.
var budgetFlags = map[string]string{"ceilingUsd": "ceiling", "period": "period", "alertAt": "alert-at",
	"autoPause": "auto-pause", "defaultJobUsd": "default-job-usd"}

// budgetPath is the budget route of the argument's product, else -p's.
func (a *app) budgetPath(args []string) (string, error) {
	p := a.product
	if len(args) == 1 {
		p = args[0]
	}
	if p == "" {
		return "", usagef("which product? give it as the argument, -p/--product or FLEET_PRODUCT")
	}
	return "/budgets/" + url.PathEscape(p), nil
}

// budgetCall sends a budget mutation and prints the budget it answers.
func (a *app) budgetCall(cmd *cobra.Command, method, path string, body []byte) error {
	var b api.Budget
	raw, err := a.call(cmd, api.Request{Method: method, Path: path, Body: body}, &b)
	if err != nil {
		return err
	}
	if a.json() {
		return a.printJSON(raw)
	}
	return a.printBudgetFields(&b)
}

func (a *app) printBudgetFields(b *api.Budget) error {
	paused := "no"
	if b.Paused {
		paused = "yes"
		if b.PausedReason != nil {
			paused += " (" + string(*b.PausedReason) + ")"
		}
		if b.PauseMessage != "" {
			paused += ": " + b.PauseMessage
		}
	}
	return a.fields([][2]string{
		{"product", b.ProductID},
		{"ceiling", usd(b.CeilingUSD) + " per " + string(b.Period)},
		{"period from", b.PeriodStart.UTC().Format("2006-01-02 15:04 UTC")},
		{"spent", usd(b.SpentUSD) + " (" + percent(b.SpentUSD, b.CeilingUSD) + ")"},
		{"reserved", usd(b.ReservedUSD)},
		{"remaining", usd(b.RemainingUSD)},
		{"paused", paused},
		{"alert at", strconv.FormatFloat(b.AlertAt*100, 'f', -1, 64) + "%"},
		{"auto pause", strconv.FormatBool(b.AutoPause)},
		{"default job", usd(b.DefaultJobUSD)},
		{"updated", a.ago(b.UpdatedAt) + " ago"},
	})
}

func usd(v float64) string { return fmt.Sprintf("$%.2f", v) }

func percent(v, of float64) string {
	if of <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", v/of*100)
}

// completeProducts offers the products the fleet knows (the owners of its
// repos) to the shell.
func (a *app) completeProducts(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if err := a.setup(cmd, args); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var page api.Page[api.RepoInfo]
	if _, err := a.call(cmd, api.Request{Method: http.MethodGet, Path: "/repos"}, &page); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, r := range page.Items {
		for _, p := range r.Products {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out, cobra.ShellCompDirectiveNoFileComp
}
