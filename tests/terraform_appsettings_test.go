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
// app_settings in terraform/functions.tf, read here as text.
func TestTerraformAppSettingsResolveEveryFunctionReference(t *testing.T) {
	root := tfRepoRoot(t)
	attrs, err := tfBlockAttrs(filepath.Join(root, "terraform", "functions.tf"))
	require.NoError(t, err)
	const prefix = "locals/function_app_settings =/"
	settings := map[string]bool{}
	for k := range attrs {
		if name, ok := strings.CutPrefix(k, prefix); ok {
			settings[name] = true
		}
	}
	require.Contains(t, settings, "FLEET_STORE", "the parser must find the app settings map (%s...)", prefix)

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
