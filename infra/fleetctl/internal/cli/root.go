// Package cli is fleetctl's command tree: every command calls the fleet API
// (/api/fleet, API.md) through the shared client (shared/api) and prints a table for
// people or, with -o json, the server's JSON for scripts.
//
// Exit codes (scripts rely on them; README lists them too):
//
//	0 ok
//	1 any other failure
//	2 usage: bad flags or arguments, or the server said invalid_argument / too_large
//	3 not found (not_found)
//	4 conflict: the request lost a race or the transition is illegal (conflict, fenced)
//	5 auth: no usable token, or the server said unauthenticated / forbidden
//	6 unavailable: the server cannot be reached or failed (unavailable, throttled, 5xx)
//	7 refused by policy: repo_not_owned, budget_exceeded, paused
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
	"github.com/gigafactory/fleet/shared/secret"
)

// Exit codes; see the package comment.
const (
	ExitOK          = 0
	ExitError       = 1
	ExitUsage       = 2
	ExitNotFound    = 3
	ExitConflict    = 4
	ExitAuth        = 5
	ExitUnavailable = 6
	ExitRefused     = 7
)

// ExitCode maps an error to the exit code scripts branch on.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	switch api.CodeOf(err) {
	case fleet.CodeInvalid, fleet.CodeTooLarge, "method_not_allowed":
		return ExitUsage
	case fleet.CodeNotFound:
		return ExitNotFound
	case fleet.CodeConflict, fleet.CodeFenced:
		return ExitConflict
	case fleet.CodeUnauthenticated, fleet.CodeForbidden:
		return ExitAuth
	case fleet.CodeUnavailable, fleet.CodeThrottled, "internal":
		return ExitUnavailable
	case fleet.CodeRepoNotOwned, fleet.CodeBudgetExceeded, fleet.CodePaused:
		return ExitRefused
	}
	return ExitError
}

// usageError is a mistake in the command line itself.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// Env is everything a run of fleetctl reads from its surroundings, so tests
// run the command tree in-process.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Now dates the AGE columns; nil means time.Now.
	Now func() time.Time
	// HTTP is the client's transport; nil means a default client.
	HTTP *http.Client
}

// Output formats.
const (
	formatTable = "table"
	formatJSON  = "json"
)

// app holds the global flags and what commands share.
type app struct {
	env       Env
	url       string
	token     string
	tokenFile string
	product   string
	output    string
	client    *api.Client
}

// DefaultURL is where `make run` listens.
const DefaultURL = "http://127.0.0.1:7071"

// localTokenFile is where `make run` keeps its generated operator token,
// relative to the repository root (fleetctl's working directory in the
// quick start).
var localTokenFile = filepath.Join(".fleet", "operator-token")

// Run runs fleetctl with args and returns its exit code.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	a := &app{env: env}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := root.ExecuteContext(ctx)
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) || isCobraUsage(err) {
			fmt.Fprintf(env.Stderr, "fleetctl: %v\nRun 'fleetctl --help' for usage.\n", err)
			return ExitUsage
		}
		fmt.Fprintf(env.Stderr, "fleetctl: %v\n", err)
	}
	return ExitCode(err)
}

// isCobraUsage recognises cobra's own argument and flag errors, which are
// plain errors.
func isCobraUsage(err error) bool {
	if api.CodeOf(err) != "" {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "requires exactly", "flag needs an argument", "invalid argument", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "fleetctl",
		Short: "Drive the gigafactory fleet from a terminal",
		Long: `fleetctl drives a fleet coordinator over its HTTP API (/api/fleet).

Connection: --url or FLEET_URL (default ` + DefaultURL + `); the operator token
from FLEET_TOKEN or --token-file / FLEET_TOKEN_FILE (not both), else
` + localTokenFile + ` (what 'make run' writes); the product from -p/--product
or FLEET_PRODUCT.

Output: tables by default; -o json prints the server's JSON.

Exit codes: 0 ok, 1 other failure, 2 usage or invalid argument, 3 not found,
4 conflict or fenced, 5 unauthenticated or forbidden, 6 server unavailable,
7 refused by policy (repo_not_owned, budget_exceeded, paused).`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: a.setup,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", "", "coordinator URL (env FLEET_URL, default "+DefaultURL+")")
	pf.StringVar(&a.tokenFile, "token-file", "", "file holding the operator token (env FLEET_TOKEN_FILE; not with FLEET_TOKEN)")
	pf.StringVarP(&a.product, "product", "p", "", "product (x-product-id; env FLEET_PRODUCT)")
	pf.StringVarP(&a.output, "output", "o", formatTable, "output format: table or json")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{formatTable, formatJSON}, cobra.ShellCompDirectiveNoFileComp))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })

	root.AddCommand(a.jobsCommand(), a.factoriesCommand(), a.productsCommand(), a.reposCommand(),
		a.profilesCommand(), a.metricsCommand(), a.alertsCommand(), a.reviewCommand(), a.topCommand(), a.budgetsCommand(),
		a.artifactsCommand(), a.trackerCommand())
	return root
}

// setup resolves the connection settings once the flags are parsed.
func (a *app) setup(cmd *cobra.Command, _ []string) error {
	if cmd.Name() == "completion" || (cmd.Parent() != nil && cmd.Parent().Name() == "completion") ||
		cmd.Name() == cobra.ShellCompRequestCmd || cmd.Name() == cobra.ShellCompNoDescRequestCmd {
		return nil
	}
	if a.output != formatTable && a.output != formatJSON {
		return usagef("-o %q: want table or json", a.output)
	}
	get := a.env.Getenv
	if a.url == "" {
		a.url = get("FLEET_URL")
	}
	if a.url == "" {
		a.url = DefaultURL
	}
	if a.product == "" {
		a.product = get("FLEET_PRODUCT")
	}
	if a.tokenFile == "" {
		a.tokenFile = get("FLEET_TOKEN_FILE")
	}
	tok := secret.Setting{Value: get("FLEET_TOKEN"), ValueName: "FLEET_TOKEN", File: a.tokenFile, FileName: "--token-file (FLEET_TOKEN_FILE)"}
	if tok.Value == "" && tok.File == "" {
		// The default only when nothing is given: with FLEET_TOKEN set it
		// would read as two tokens.
		if _, err := os.Stat(localTokenFile); err == nil {
			tok.File, tok.FileName = localTokenFile, "--token-file's default"
		}
	}
	var err error
	if a.token, err = secret.Resolve(tok); err != nil {
		return &api.Error{Code: fleet.CodeUnauthenticated, Message: err.Error()}
	}
	a.client = api.New(api.Config{BaseURL: a.url, Token: a.token, Product: a.product, HTTPClient: a.env.HTTP})
	if a.product != "" && a.token != "" && !(cmd.Name() == "put" && cmd.Parent() != nil && cmd.Parent().Name() == "products") {
		// A product that does not exist would otherwise read as an
		// empty one: no jobs, no factories, no alerts.
		return a.checkProduct(cmd)
	}
	return nil
}

// checkProduct refuses a product the coordinator does not know, naming
// the ones this token can see.
func (a *app) checkProduct(cmd *cobra.Command) error {
	_, err := a.client.JSON(cmd.Context(), api.Request{Method: http.MethodGet, Path: "/products/" + url.PathEscape(a.product), Exact: true}, nil)
	switch {
	case err == nil:
		return nil
	case retryableStreamError(err):
		return err // the command would fail the same way, after as long a wait
	case api.CodeOf(err) != fleet.CodeNotFound:
		return nil // not this check's to judge: the command says what is wrong
	}
	var repos api.List[api.RepoInfo]
	if _, err := a.client.JSON(cmd.Context(), api.Request{Method: http.MethodGet, Path: "/repos", Exact: true}, &repos); err != nil {
		return err
	}
	var known []string
	for _, r := range repos.Items {
		known = append(known, r.Products...)
	}
	slices.Sort(known)
	known = slices.Compact(known)
	seen := "this token sees no product yet"
	if len(known) > 0 {
		seen = "this token sees " + strings.Join(known, ", ")
	}
	return &api.Error{Code: fleet.CodeNotFound, Message: fmt.Sprintf("product %s is unknown (-p/--product or FLEET_PRODUCT): %s", a.product, seen)}
}

func (a *app) json() bool { return a.output == formatJSON }

// call sends req; out, when non-nil, receives the decoded answer.
func (a *app) call(cmd *cobra.Command, req api.Request, out any) ([]byte, error) {
	if a.token == "" {
		return nil, &api.Error{Code: fleet.CodeUnauthenticated, Message: "no operator token: set FLEET_TOKEN or --token-file"}
	}
	return a.client.JSON(cmd.Context(), req, out)
}

// needProduct is the product a product-scoped command runs in.
func (a *app) needProduct() (string, error) {
	if a.product == "" {
		return "", usagef("this command needs a product: -p/--product or FLEET_PRODUCT")
	}
	return a.product, nil
}

// printJSON prints a server answer indented, as it came.
func (a *app) printJSON(raw []byte) error {
	var buf bytes.Buffer
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := a.env.Stdout.Write(buf.Bytes())
	return err
}

// printValue prints a value the CLI made itself (no server body) as JSON.
func (a *app) printValue(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return a.printJSON(b)
}

// table writes rows under a header, aligned, each cell escaped (display).
func (a *app) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(a.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = display(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// fields prints "key: value" lines, aligned, each value escaped (display).
func (a *app) fields(kv [][2]string) error {
	tw := tabwriter.NewWriter(a.env.Stdout, 0, 0, 1, ' ', 0)
	for _, f := range kv {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], display(f[1]))
	}
	return tw.Flush()
}

func (a *app) printf(format string, args ...any) {
	fmt.Fprintf(a.env.Stdout, format, args...)
}

// ago renders t relative to now: "42s", "5m", "3h", "2d"; "-" for zero.
func (a *app) ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := a.env.Now().Sub(t)
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// readInput reads FILE, or stdin for "-".
func (a *app) readInput(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(a.env.Stdin)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return b, nil
}

// doRaw sends req and returns the whole answer (its status tells 201 from
// 200, 202 from 200).
func (a *app) doRaw(cmd *cobra.Command, req api.Request) (*api.Response, error) {
	if a.token == "" {
		return nil, &api.Error{Code: fleet.CodeUnauthenticated, Message: "no operator token: set FLEET_TOKEN or --token-file"}
	}
	return a.client.Do(cmd.Context(), req)
}

func decode(resp *api.Response, out any) error {
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return &api.Error{Status: resp.Status, Code: fleet.CodeUnavailable, Message: "undecodable answer: " + err.Error()}
	}
	return nil
}

func jsonBody(v any) ([]byte, error) { return json.Marshal(v) }
