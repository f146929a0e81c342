package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConsoleLiveLog: the console's job page shows a running job's output
// live (Chromium, signed in as a user does): a real factory's engine prints
// a line every 200 ms, and each shows in the page within 2 s; colours are
// stripped, markup stays text, the search shows the matching lines, and
// scrolling up pauses the follow.
func TestConsoleLiveLog(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startStack(t)
	repo := newFacRepo(t, "talk")
	s.Product("demo", repo.Name)
	goFile := filepath.Join(t.TempDir(), "go")
	startFactory(t, s, "fa", "demo", 1, repo, facEngine(t, `while [ ! -e `+goFile+` ]; do sleep 0.05; done
printf '\033[31mred\033[0m <b>not html</b>\n'
for i in $(seq 1 30); do echo "line $i $(date +%s%N)"; sleep 0.2; done`))
	id := s.Submit("demo", Manifest("Talk", repo.Name))
	facWaitStage(t, s, "demo", id, "building", 60*time.Second)

	consoleSignIn(t, ctx, s, "demo")
	evalJS[string](t, ctx, `location.hash = '#/job/`+id+`'`)
	waitJS(t, ctx, 20*time.Second, "the live log follows", `document.querySelector('#live-log-state').textContent === 'following'`)
	require.NoError(t, os.WriteFile(goFile, nil, 0o600))

	// Each line, as soon as the page shows it, against when it was printed.
	lineRE := regexp.MustCompile(`line (\d+) (\d+)`)
	shownAt := map[int]time.Duration{}
	deadline := time.Now().Add(30 * time.Second)
	for len(shownAt) < 30 && time.Now().Before(deadline) {
		text := evalJS[string](t, ctx, `document.querySelector('#live-log').textContent`)
		now := time.Now()
		for _, m := range lineRE.FindAllStringSubmatch(text, -1) {
			n, _ := strconv.Atoi(m[1])
			ns, _ := strconv.ParseInt(m[2], 10, 64)
			if _, seen := shownAt[n]; !seen {
				shownAt[n] = now.Sub(time.Unix(0, ns))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Len(t, shownAt, 30, "every line shows")
	var late []time.Duration
	for n := 1; n <= 30; n++ {
		require.LessOrEqual(t, shownAt[n], 2*time.Second, "line %d shown %v after the engine printed it", n, shownAt[n])
		late = append(late, shownAt[n])
	}
	slices.Sort(late)
	t.Logf("engine write -> console: p50 %v, max %v", late[15], late[29])

	text := evalJS[string](t, ctx, `document.querySelector('#live-log').textContent`)
	require.True(t, strings.HasPrefix(text, "red <b>not html</b>\n"), "colours stripped, markup as text: %q", text[:min(len(text), 60)])
	require.False(t, evalJS[bool](t, ctx, `!!document.querySelector('#live-log b')`), "never rendered as HTML")
	require.Equal(t, 31, strings.Count(text, "\n"), "each line once")

	evalJS[bool](t, ctx, `(() => { const s = document.querySelector('#live-log-search'); s.value = 'line 7 '; s.dispatchEvent(new Event('input')); return true; })()`)
	found := evalJS[string](t, ctx, `document.querySelector('#live-log').textContent`)
	require.Regexp(t, `^line 7 \d+$`, found, "the search shows the matching line only")
	evalJS[bool](t, ctx, `(() => { const s = document.querySelector('#live-log-search'); s.value = ''; s.dispatchEvent(new Event('input')); return true; })()`)

	evalJS[bool](t, ctx, `(() => { const p = document.querySelector('#live-log'); p.scrollTop = 0; p.dispatchEvent(new Event('scroll')); return true; })()`)
	state := evalJS[string](t, ctx, `document.querySelector('#live-log-state').textContent`)
	require.True(t, strings.HasPrefix(state, "paused"), "scrolling up pauses: %q", state)
}
