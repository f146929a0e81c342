package secret_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/secret"
)

// TestResolve: a secret comes from its value or its file, never both; the
// file's content is trimmed and must hold something; every error names
// the setting at fault and never holds the secret.
func TestResolve(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, empty, unreadable := filepath.Join(dir, "token"), filepath.Join(dir, "empty"), filepath.Join(dir, "missing")
	require.NoError(t, os.WriteFile(good, []byte("tok_from_file\n"), 0o600))
	require.NoError(t, os.WriteFile(empty, []byte(" \n"), 0o600))
	const valueName, fileName = "--token (TOKEN)", "--token-file (TOKEN_FILE)"
	tests := []struct {
		name        string
		value, path string
		want        string
		err         []string // what the error must name
		errIs       error
	}{
		{name: "value only", value: "tok_value", want: "tok_value"},
		{name: "value trimmed", value: " tok_value\n", want: "tok_value"},
		{name: "file only, trailing newline trimmed", path: good, want: "tok_from_file"},
		{name: "both set", value: "tok_value", path: good, err: []string{valueName, fileName, "not both"}},
		{name: "blank value and a file are both set", value: " ", path: good, err: []string{valueName, fileName}},
		{name: "neither", want: ""},
		{name: "blank value is none", value: " \n", want: ""},
		{name: "unreadable file", path: unreadable, err: []string{fileName, unreadable}, errIs: fs.ErrNotExist},
		{name: "empty file", path: empty, err: []string{fileName, empty, "is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := secret.Resolve(secret.Setting{Value: tt.value, ValueName: valueName, File: tt.path, FileName: fileName})
			if tt.err == nil {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			require.Error(t, err)
			require.Empty(t, got)
			for _, s := range tt.err {
				require.ErrorContains(t, err, s)
			}
			require.NotContains(t, err.Error(), "tok_")
			if tt.errIs != nil {
				require.ErrorIs(t, err, tt.errIs)
			}
		})
	}
}
