package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/coord"
)

// TestForgeSettings: the GitHub token and webhook secret come as values
// (Azure's Key Vault references) or in files, never both; a file must hold
// something; a token builds the forge client, and the public URL the job
// link; a public URL that is not http(s) is refused naming the setting.
func TestForgeSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	tokenFile, empty := file("token", "ghp_from_a_file\n"), file("empty", " \n")

	var deps coord.Deps
	secret, err := forgeDeps(testLookup(t, map[string]string{config.GitHubToken: "ghp_value", config.GitHubSecret: "s3cret",
		config.PublicURL: "https://fleet.example.com/"}), &deps)
	require.NoError(t, err)
	require.Equal(t, []byte("s3cret"), secret)
	require.NotNil(t, deps.Forge)
	require.Equal(t, "https://fleet.example.com/api/console/#/job/j1", deps.JobURL("p", "j1"))

	deps = coord.Deps{}
	secret, err = forgeDeps(testLookup(t, map[string]string{config.GitHubTokenFile: tokenFile}), &deps)
	require.NoError(t, err)
	require.Nil(t, secret, "no secret: the route answers 503")
	require.NotNil(t, deps.Forge)
	require.Nil(t, deps.JobURL)

	deps = coord.Deps{}
	_, err = forgeDeps(testLookup(t, nil), &deps)
	require.NoError(t, err)
	require.Nil(t, deps.Forge, "no token, no client")

	for name, l := range map[string]map[string]string{
		config.GitHubToken:      {config.GitHubToken: "a", config.GitHubTokenFile: tokenFile},
		config.GitHubSecretFile: {config.GitHubSecretFile: empty},
		config.PublicURL:        {config.PublicURL: "fleet.example.com"},
	} {
		_, err := forgeDeps(testLookup(t, l), &coord.Deps{})
		require.ErrorContains(t, err, name)
	}
}
