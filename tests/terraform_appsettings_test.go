package tests

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/local/hostemu"
)

// The Functions host resolves a function.json's %SETTING% from the app's
// settings only (not from the handler's documented defaults), and fails to
// index a function whose reference is not set; a cosmosDBTrigger's
// connection needs <connection>__accountEndpoint with an identity. So every
// reference and connection of every function must be in the Function App's
// app_settings in terraform/functions.tf (local.function_app_settings, with
// the locals it merges in), read with the HCL parser.
func TestTerraformAppSettingsResolveEveryFunctionReference(t *testing.T) {
	t.Parallel()
	root := tfRepoRoot(t)
	locals := tfLocals(tfBody(t, filepath.Join(root, "terraform", "functions.tf")))
	appSettings, ok := locals["function_app_settings"]
	require.True(t, ok, "terraform/functions.tf: no local function_app_settings")
	settings := map[string]bool{}
	for _, k := range tfObjectKeys(appSettings, locals) {
		settings[k] = true
	}
	require.Contains(t, settings, "FLEET_STORE", "the keys of local.function_app_settings: %v", settings)

	fa, err := hostemu.LoadApp(root)
	require.NoError(t, err)
	for _, r := range fa.SettingRefs() {
		require.True(t, settings[r.Name], "%s/function.json: %s.%s references %%%s%%, which terraform/functions.tf does not set in app_settings: the host would not index %s", r.Function, r.Binding, r.Property, r.Name, r.Function)
	}
	for _, fn := range fa.Functions {
		for _, b := range fn.Bindings {
			if strings.EqualFold(b.Type, "cosmosDBTrigger") {
				var conn string
				require.NoError(t, json.Unmarshal(b.Props["connection"], &conn))
				for _, suffix := range []string{"__accountEndpoint", "__credential", "__clientId"} {
					require.True(t, settings[conn+suffix], "%s: connection %s needs %s%s in app_settings", fn.Name, conn, conn, suffix)
				}
			}
		}
	}
}
