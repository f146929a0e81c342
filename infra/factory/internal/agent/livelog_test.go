package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gigafactory/fleet/shared/api"
)

// shippingCoord is an engineCoord that keeps the run's live log as the
// shipper appends it (API.md "Live output": a chunk at an offset already
// stored is taken again, one past the end is a gap).
type shippingCoord struct {
	*engineCoord
	logMu sync.Mutex
	log   []byte
}

func (c *shippingCoord) AppendLog(_ context.Context, _, _ string, _, off int64, chunk []byte) (api.LogAppended, error) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	if off > int64(len(c.log)) {
		return api.LogAppended{}, fmt.Errorf("a gap: offset %d past the log's %d bytes", off, len(c.log))
	}
	if end := off + int64(len(chunk)); end > int64(len(c.log)) {
		c.log = append(c.log[:off], chunk...)
	}
	return api.LogAppended{Size: int64(len(c.log))}, nil
}

func (c *shippingCoord) shipped() string {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	return string(c.log)
}

// artifact is the body of the run's artifact name ("" when none was
// uploaded).
func (p *presetT) artifact(name string) string {
	for _, u := range p.coord.uploaded() {
		if u.name == name {
			return u.body
		}
	}
	return ""
}

// TestLiveLogHasTheLastLine: a structured engine whose output ends without
// a newline: the transcript's last line reaches the live log as it reaches
// engine.log, since the transcript renders it before the shipper's final
// flush. The live log is the artifact, byte for byte.
func TestLiveLogHasTheLastLine(t *testing.T) {
	p := newPresetT(t, "unterminated")
	c := &shippingCoord{engineCoord: p.coord}
	p.a.api = c
	require.Equal(t, OutcomeDone, p.run(t), "fails: %q", p.coord.fails)
	log := p.artifact(artifactLog)
	require.Contains(t, log, "fake claude: the last words, with no newline\n")
	require.Equal(t, log, c.shipped())
}
