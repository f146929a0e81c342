package app

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitContainerURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, service, container, err string
	}{
		{in: "https://acct.blob.core.windows.net/artifacts", service: "https://acct.blob.core.windows.net", container: "artifacts"},
		{in: "https://acct.blob.core.windows.net/artifacts/", service: "https://acct.blob.core.windows.net", container: "artifacts"},
		{in: "http://127.0.0.1:10000/devstoreaccount1/artifacts", service: "http://127.0.0.1:10000/devstoreaccount1", container: "artifacts"},
		{in: "https://acct.blob.core.windows.net/", err: "names no container"},
		{in: "acct/artifacts", err: "want the container's URL"},
		{in: "ftp://acct/artifacts", err: "want the container's URL"},
	} {
		service, container, err := splitContainerURL(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.service, service, tc.in)
		require.Equal(t, tc.container, container, tc.in)
	}
}
