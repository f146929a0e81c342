package tail

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBufferKeepsTheLastLines(t *testing.T) {
	t.Parallel()
	b := &Buffer{Max: 20}
	for i := range 10 {
		_, err := fmt.Fprintf(b, "line %d\n", i)
		require.NoError(t, err)
	}
	require.Equal(t, "line 8\nline 9\n", b.String(), "cut to the limit, then to the next line start")
}
