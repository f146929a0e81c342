package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

func TestExitCodeFromAPICode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		code fleet.Code
		want int
	}{
		{fleet.CodeInvalid, ExitUsage},
		{fleet.CodeTooLarge, ExitUsage},
		{fleet.CodeNotFound, ExitNotFound},
		{fleet.CodeConflict, ExitConflict},
		{fleet.CodeFenced, ExitConflict},
		{fleet.CodeUnauthenticated, ExitAuth},
		{fleet.CodeForbidden, ExitAuth},
		{fleet.CodeUnavailable, ExitUnavailable},
		{fleet.CodeThrottled, ExitUnavailable},
		{"internal", ExitUnavailable},
		{fleet.CodeRepoNotOwned, ExitRefused},
		{fleet.CodeBudgetExceeded, ExitRefused},
		{fleet.CodePaused, ExitRefused},
		{"something_new", ExitError},
	} {
		require.Equal(t, tt.want, ExitCode(&api.Error{Code: tt.code}), "%s", tt.code)
	}
	require.Equal(t, ExitOK, ExitCode(nil))
	require.Equal(t, ExitError, ExitCode(errors.New("boom")))
	require.Equal(t, ExitUsage, ExitCode(usagef("bad")))
}

// Completion scripts come from cobra for every shell the brief names; they
// need no server and no token.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		var out, errb bytes.Buffer
		code := Run(context.Background(), []string{"completion", shell}, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			Getenv: func(string) string { return "" }})
		require.Equal(t, ExitOK, code, "%s: %s", shell, errb.String())
		require.Contains(t, out.String(), "fleetctl", shell)
	}
}
