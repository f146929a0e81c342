package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/term"
	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// topData is one snapshot of the fleet for the dashboard.
type topData struct {
	metrics   *api.Metrics
	factories []fleet.Factory
	running   []fleet.Job
	review    []fleet.Job
	// failed are the latest jobs that failed or dead-lettered, newest first.
	failed []fleet.Job
	at     time.Time
}

// rows are the jobs a cursor moves over, in the order they are drawn.
func (d *topData) rows() []fleet.Job {
	return slices.Concat(d.running, d.review, d.failed)
}

// topDetail is the selected job as its detail pane shows it.
type topDetail struct {
	job  *fleet.Job
	runs []fleet.Run
	// log is the tail of the run's live output (logTail), "" when it has
	// none; logEpoch names the run, logDone says it ended.
	log      string
	logEpoch string
	logDone  bool
}

type (
	topDataMsg   topData
	topErrMsg    struct{ err error }
	topTickMsg   struct{}
	topChangeMsg struct{}
	topLiveMsg   struct{ state string }
	topDetailMsg struct {
		id     string
		detail *topDetail
		err    error
	}
)

// topFailedShown is how many failed jobs the dashboard lists.
const topFailedShown = 10

// topModel is the dashboard: board counts per stage, factories, running,
// review and failed jobs and alerts, refreshed on every change of the
// product's event stream and on a timer (the only trigger when the server
// has no stream). As in k9s, a cursor selects a job and Enter opens its
// detail; Esc goes back.
type topModel struct {
	a        *app
	ctx      context.Context
	product  string
	interval time.Duration
	data     *topData
	err      error
	live     string
	width    int
	fetching bool
	again    bool
	// cursor is the selected row of data.rows(); selected its job id, so
	// the selection follows the job when a refresh reorders the rows.
	cursor   int
	selected string
	// open is the job whose detail is shown ("" for the dashboard).
	open      string
	detail    *topDetail
	detailErr error
}

func (a *app) topCommand() *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live terminal dashboard: stages, factories, running, review and failed jobs, alerts (enter: a job's detail, q quits)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			product, err := a.needProduct()
			if err != nil {
				return err
			}
			if !isTerminal(a.env.Stdin) || !isTerminal(a.env.Stdout) {
				return usagef("top is a full-screen dashboard and needs a terminal: its input or output is not one. " +
					"From a script, read 'fleetctl metrics', 'fleetctl alerts' or 'fleetctl jobs ls' (-o json)")
			}
			if a.token == "" {
				return &api.Error{Code: fleet.CodeUnauthenticated, Message: "no operator token: set FLEET_TOKEN or --token-file"}
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			m := &topModel{a: a, ctx: ctx, product: product, interval: interval, live: "polling"}
			p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(ctx), tea.WithInput(a.env.Stdin), tea.WithOutput(a.env.Stdout))
			go a.topStream(ctx, p)
			_, err = p.Run()
			if err == tea.ErrProgramKilled && ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 5*time.Second, "refresh at least this often")
	return cmd
}

// topStream follows the product's event stream and tells the dashboard of
// every change; it reconnects with the last id it saw.
func (a *app) topStream(ctx context.Context, p *tea.Program) {
	last, backoff := "", time.Second
	for ctx.Err() == nil {
		var err error
		last, err = a.client.Stream(ctx, api.StreamRequest{Path: "/events/stream", After: last, Opened: func() {
			p.Send(topLiveMsg{state: "live"})
			backoff = time.Second
		}}, func(api.Event) error {
			p.Send(topChangeMsg{})
			return nil
		})
		if api.CodeOf(err) == fleet.CodeNotFound {
			p.Send(topLiveMsg{state: "polling"}) // a server without the stream
			return
		}
		if ctx.Err() != nil {
			return
		}
		p.Send(topLiveMsg{state: "reconnecting"})
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 15*time.Second)
	}
}

func (m *topModel) Init() tea.Cmd { return tea.Batch(m.fetch(), m.tick()) }

func (m *topModel) tick() tea.Cmd {
	return tea.Tick(m.interval, func(time.Time) tea.Msg { return topTickMsg{} })
}

func (m *topModel) fetch() tea.Cmd {
	m.fetching = true
	a, ctx := m.a, m.ctx
	return func() tea.Msg {
		var d topData
		var fs api.Page[fleet.Factory]
		var assigned, building, review, failed, dead api.Page[fleet.Job]
		metrics := &api.Metrics{}
		for _, c := range []struct {
			path string
			out  any
		}{
			{"/metrics", metrics}, {"/factories", &fs},
			{"/jobs?stage=assigned&limit=500", &assigned}, {"/jobs?stage=building&limit=500", &building},
			{"/jobs?stage=review&limit=100", &review},
			// Newest first: the latest failures of each kind.
			{"/jobs?stage=failed&limit=" + strconv.Itoa(topFailedShown), &failed},
			{"/jobs?stage=dead_letter&limit=" + strconv.Itoa(topFailedShown), &dead},
		} {
			if _, err := a.client.JSON(ctx, api.Request{Method: http.MethodGet, Path: c.path}, c.out); err != nil {
				return topErrMsg{err: err}
			}
		}
		d.metrics, d.factories = metrics, fs.Items
		d.running = append(assigned.Items, building.Items...)
		d.review = review.Items
		d.failed = append(failed.Items, dead.Items...)
		slices.SortFunc(d.failed, func(x, y fleet.Job) int { return y.UpdatedAt.Compare(x.UpdatedAt) })
		d.failed = d.failed[:min(len(d.failed), topFailedShown)]
		d.at = a.env.Now()
		return topDataMsg(d)
	}
}

func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "ctrl+c":
			return m, tea.Quit
		case "esc", "backspace":
			if m.open == "" {
				return m, tea.Quit
			}
			m.open, m.detail, m.detailErr = "", nil, nil
		case "r":
			if m.open != "" {
				return m, tea.Batch(m.refetch(), m.fetchDetail(m.open))
			}
			return m, m.refetch()
		case "up", "k":
			m.move(-1)
		case "down", "j":
			m.move(1)
		case "enter":
			if m.open == "" && m.selected != "" {
				m.open, m.detail, m.detailErr = m.selected, nil, nil
				return m, m.fetchDetail(m.open)
			}
		}
	case topDetailMsg:
		if msg.id == m.open {
			m.detail, m.detailErr = msg.detail, msg.err
		}
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case topTickMsg:
		return m, tea.Batch(m.refetch(), m.tick())
	case topChangeMsg:
		if m.open != "" {
			return m, tea.Batch(m.refetch(), m.fetchDetail(m.open))
		}
		return m, m.refetch()
	case topLiveMsg:
		m.live = msg.state
	case topDataMsg:
		d := topData(msg)
		m.data, m.err = &d, nil
		m.follow()
		return m, m.done()
	case topErrMsg:
		m.err = msg.err
		return m, m.done()
	}
	return m, nil
}

// move moves the cursor by delta over the job rows.
func (m *topModel) move(delta int) {
	if m.data == nil || m.open != "" {
		return
	}
	rows := m.data.rows()
	if len(rows) == 0 {
		return
	}
	m.cursor = max(0, min(len(rows)-1, m.cursor+delta))
	m.selected = rows[m.cursor].ID
}

// follow keeps the selection on its job across a refresh; a job gone from
// the rows leaves the cursor where it was.
func (m *topModel) follow() {
	rows := m.data.rows()
	if i := slices.IndexFunc(rows, func(j fleet.Job) bool { return j.ID == m.selected }); i >= 0 {
		m.cursor = i
		return
	}
	if len(rows) == 0 {
		m.cursor, m.selected = 0, ""
		return
	}
	m.cursor = max(0, min(len(rows)-1, m.cursor))
	m.selected = rows[m.cursor].ID
}

// fetchDetail reads the job the detail pane shows, and its runs.
func (m *topModel) fetchDetail(id string) tea.Cmd {
	a, ctx := m.a, m.ctx
	return func() tea.Msg {
		var j fleet.Job
		var runs api.Page[fleet.Run]
		path := "/jobs/" + url.PathEscape(id)
		if _, err := a.client.JSON(ctx, api.Request{Method: http.MethodGet, Path: path}, &j); err != nil {
			return topDetailMsg{id: id, err: err}
		}
		if _, err := a.client.JSON(ctx, api.Request{Method: http.MethodGet, Path: path + "/runs"}, &runs); err != nil {
			return topDetailMsg{id: id, err: err}
		}
		d := &topDetail{job: &j, runs: runs.Items}
		// The live output is best effort: a job that never ran has none.
		d.log, d.logEpoch, d.logDone, _ = readLogTail(ctx, a.client, j.ProductID, id)
		return topDetailMsg{id: id, detail: d}
	}
}

// logTailBytes is how much of a run's log the detail pane reads.
const logTailBytes = 8 << 10

// readLogTail reads the end of the job's current (else newest) run's log:
// the answer's size header first, then, for a long log, only its last
// logTailBytes.
func readLogTail(ctx context.Context, c *api.Client, product, id string) (tail, epoch string, done bool, err error) {
	get := func(offset int64) (*http.Response, error) {
		return c.OpenLog(ctx, api.LogRequest{Product: product, JobID: id, Offset: offset})
	}
	resp, err := get(0)
	if err != nil {
		return "", "", false, err
	}
	if size, err := strconv.ParseInt(resp.Header.Get(api.HeaderLogSize), 10, 64); err == nil && size > logTailBytes {
		resp.Body.Close()
		if resp, err = get(size - logTailBytes); err != nil {
			return "", "", false, err
		}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 2*logTailBytes))
	if err != nil {
		return "", "", false, err
	}
	return string(b), resp.Header.Get(api.HeaderLogEpoch), resp.Header.Get(api.HeaderLogComplete) == "true", nil
}

// refetch fetches now, or once more after the fetch in flight.
func (m *topModel) refetch() tea.Cmd {
	if m.fetching {
		m.again = true
		return nil
	}
	return m.fetch()
}

func (m *topModel) done() tea.Cmd {
	m.fetching = false
	if m.again {
		m.again = false
		return m.fetch()
	}
	return nil
}

var (
	topTitle = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("15")).Background(lipgloss.Color("24")).Padding(0, 1)
	topHead  = lipgloss.NewStyle().Bold(true).Underline(true)
	topBox   = lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1)
	topWarn  = lipgloss.NewStyle().Foreground(lipgloss.Color("214"))
	topBad   = lipgloss.NewStyle().Foreground(lipgloss.Color("203")).Bold(true)
	topGood  = lipgloss.NewStyle().Foreground(lipgloss.Color("78"))
	topDim   = lipgloss.NewStyle().Foreground(lipgloss.Color("245"))
	topSel   = lipgloss.NewStyle().Reverse(true)
)

func (m *topModel) View() string {
	var b strings.Builder
	var status string
	switch m.live {
	case "live":
		status = topGood.Render("● live")
	case "reconnecting":
		status = topBad.Render("● reconnecting…")
	default:
		status = topDim.Render("● polling every " + m.interval.String())
	}
	updated := "loading…"
	if m.data != nil {
		updated = "updated " + m.data.at.Format("15:04:05")
	}
	b.WriteString(topTitle.Render("fleet top · product "+m.product) + "  " + status + "  " + topDim.Render(updated) + "\n")
	if m.err != nil {
		b.WriteString(topBad.Render("error: "+m.err.Error()) + "\n")
	}
	if m.open != "" {
		m.viewDetail(&b)
		return b.String()
	}
	if m.data == nil {
		return b.String()
	}
	d := m.data
	// Board: every active stage with its count.
	var cells []string
	for _, st := range fleet.Stages {
		if n, ok := d.metrics.Jobs[string(st)]; ok {
			cells = append(cells, topBox.Render(fmt.Sprintf("%s\n%d", st, n)))
		}
	}
	b.WriteString(lipgloss.JoinHorizontal(lipgloss.Top, cells...) + "\n")
	f := d.metrics.Factories
	b.WriteString(topHead.Render(fmt.Sprintf("Factories (%d, seats %d/%d)", f.Total, f.Load, f.Seats)) + "\n")
	fs := append([]fleet.Factory(nil), d.factories...)
	sort.Slice(fs, func(i, j int) bool { return fs[i].ID < fs[j].ID })
	for _, x := range fs {
		h := string(x.Health)
		switch x.Health {
		case fleet.HealthOK:
			h = topGood.Render(h)
		case fleet.HealthDown:
			h = topBad.Render(h)
		default:
			h = topWarn.Render(h)
		}
		drain := ""
		if x.Draining {
			drain = " " + topWarn.Render("draining")
		}
		fmt.Fprintf(&b, "  %-20s %-8s %s%s  seats %d/%d  %s\n", x.ID, x.Kind, h, drain, x.Load, x.SeatLimit, truncate(list(x.Repos), 40))
	}
	row := 0
	jobs := func(title string, js []fleet.Job, who func(fleet.Job) string) {
		b.WriteString(topHead.Render(fmt.Sprintf("%s (%d)", title, len(js))) + "\n")
		for _, j := range js {
			line := fmt.Sprintf("%-32s %-11s %-24s %s", j.ID, j.Stage, truncate(who(j), 24), truncate(display(j.Title), 50))
			if row == m.cursor && j.ID == m.selected {
				b.WriteString(topSel.Render("› "+line) + "\n")
			} else {
				b.WriteString("  " + line + "\n")
			}
			row++
		}
	}
	jobs("Running jobs", d.running, func(j fleet.Job) string { return orDash(j.HolderFactoryID) })
	jobs("In review", d.review, func(j fleet.Job) string {
		if r := j.Review; r != nil {
			return fmt.Sprintf("%d of %d approvals", r.Approvals, max(r.Quorum, 1))
		}
		return "-"
	})
	jobs("Failed, latest", d.failed, func(j fleet.Job) string {
		if f := j.LastFailure; f != nil {
			return f.Reason
		}
		return "-"
	})
	b.WriteString(topHead.Render(fmt.Sprintf("Alerts (%d)", len(d.metrics.Alerts))) + "\n")
	for _, al := range d.metrics.Alerts {
		sev := topWarn.Render(string(al.Severity))
		if al.Severity == fleet.SeverityCritical {
			sev = topBad.Render(string(al.Severity))
		}
		fmt.Fprintf(&b, "  %s %s %s: %s\n", sev, al.Kind, al.Subject, truncate(al.Message, 80))
	}
	b.WriteString(topDim.Render("↑/↓ select · enter details · r refresh · q quit") + "\n")
	return b.String()
}

// viewDetail draws the open job: its fields, its runs, and the place its
// live log will take.
func (m *topModel) viewDetail(b *strings.Builder) {
	switch {
	case m.detailErr != nil:
		b.WriteString(topBad.Render("job "+m.open+": "+m.detailErr.Error()) + "\n")
	case m.detail == nil:
		b.WriteString(topDim.Render("loading job "+m.open+"…") + "\n")
	default:
		j := m.detail.job
		b.WriteString(topHead.Render("Job "+j.ID) + "  " + display(j.Title) + "\n")
		fields := [][2]string{{"stage", string(j.Stage)}, {"repo", j.Repo}, {"priority", string(j.Priority)},
			{"holder", orDash(j.HolderFactoryID)}, {"attempts", fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts)},
			{"capabilities", list(j.Capabilities)}, {"updated", m.a.ago(j.UpdatedAt) + " ago"}}
		if r := j.Review; r != nil {
			fields = append(fields, [2]string{"review", fmt.Sprintf("%d of %d approvals, head %s", r.Approvals, max(r.Quorum, 1), orDash(r.Head))})
		}
		if f := j.LastFailure; f != nil {
			fields = append(fields, [2]string{"last failure", oneLine(f.Reason, 100)})
		}
		for _, f := range fields {
			fmt.Fprintf(b, "  %-13s %s\n", f[0]+":", display(f[1]))
		}
		b.WriteString(topHead.Render(fmt.Sprintf("Runs (%d)", len(m.detail.runs))) + "\n")
		for _, r := range m.detail.runs {
			fmt.Fprintf(b, "  %-3d %-16s %-10s %-18s %-20s %s\n", r.LeaseEpoch, r.FactoryID, r.Result, usageCell(r.Usage), engineCell(r), display(oneLine(r.Reason, 50)))
		}
		b.WriteString(m.logPane())
	}
	b.WriteString(topDim.Render("esc back · r refresh · q quit") + "\n")
}

// logPaneLines is how many of the log's last lines the pane shows.
const logPaneLines = 12

// logPane shows the last lines of the open job's live output, refreshed
// with the detail, terminal escapes removed (the engine's colours would
// otherwise reach this terminal as commands).
func (m *topModel) logPane() string {
	d := m.detail
	if d == nil || d.log == "" {
		return ""
	}
	state := "live"
	if d.logDone {
		state = "ended"
	}
	lines := strings.Split(strings.TrimRight(stripEscapes(d.log), "\n"), "\n")
	if len(lines) > logPaneLines {
		lines = lines[len(lines)-logPaneLines:]
	}
	var b strings.Builder
	b.WriteString(topHead.Render(fmt.Sprintf("Output (run %s, %s)", orDash(d.logEpoch), state)) + "\n")
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// isTerminal reports whether f is a terminal (a file that is a TTY).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(file.Fd())
}
