package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/blob/blobtest"
)

func TestEnvNameIsTheOneTestsRead(t *testing.T) {
	require.Equal(t, blobtest.EnvAzurite, envAzurite)
}

func TestListeningLine(t *testing.T) {
	m := listening.FindStringSubmatch("Azurite Blob service successfully listens on http://127.0.0.1:35751")
	require.Equal(t, []string{"successfully listens on http://127.0.0.1:35751", "http://127.0.0.1:35751"}, m)
}
