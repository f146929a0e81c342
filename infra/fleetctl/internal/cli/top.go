package cli

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

// topData is one snapshot of the fleet for the dashboard.
type topData struct {
	metrics   *api.Metrics
	factories []fleet.Factory
	running   []fleet.Job
	at        time.Time
}

type (
	topDataMsg   topData
	topErrMsg    struct{ err error }
	topTickMsg   struct{}
	topChangeMsg struct{}
	topLiveMsg   struct{ state string }
)

// topModel is the dashboard: board counts per stage, factories, running
// jobs and alerts, refreshed on every change of the product's event stream
// and on a timer (the only trigger when the server has no stream).
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
}

func (a *app) topCommand() *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live terminal dashboard: stage counts, factories, running jobs, alerts (q quits)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			product, err := a.needProduct()
			if err != nil {
				return err
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
		var assigned, building api.Page[fleet.Job]
		metrics := &api.Metrics{}
		for _, c := range []struct {
			path string
			out  any
		}{
			{"/metrics", metrics}, {"/factories", &fs},
			{"/jobs?stage=assigned&limit=500", &assigned}, {"/jobs?stage=building&limit=500", &building},
		} {
			if _, err := a.client.JSON(ctx, api.Request{Method: http.MethodGet, Path: c.path}, c.out); err != nil {
				return topErrMsg{err: err}
			}
		}
		d.metrics, d.factories = metrics, fs.Items
		d.running = append(assigned.Items, building.Items...)
		d.at = a.env.Now()
		return topDataMsg(d)
	}
}

func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			return m, tea.Quit
		case "r":
			return m, m.refetch()
		}
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case topTickMsg:
		return m, tea.Batch(m.refetch(), m.tick())
	case topChangeMsg:
		return m, m.refetch()
	case topLiveMsg:
		m.live = msg.state
	case topDataMsg:
		d := topData(msg)
		m.data, m.err = &d, nil
		return m, m.done()
	case topErrMsg:
		m.err = msg.err
		return m, m.done()
	}
	return m, nil
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
		fmt.Fprintf(&b, "  %-20s %-8s %s  seats %d/%d  %s\n", x.ID, x.Kind, h, x.Load, x.SeatLimit, truncate(list(x.Repos), 40))
	}
	b.WriteString(topHead.Render(fmt.Sprintf("Running jobs (%d)", len(d.running))) + "\n")
	for _, j := range d.running {
		fmt.Fprintf(&b, "  %-32s %-9s %-16s %s\n", j.ID, j.Stage, orDash(j.HolderFactoryID), truncate(j.Title, 50))
	}
	b.WriteString(topHead.Render(fmt.Sprintf("Alerts (%d)", len(d.metrics.Alerts))) + "\n")
	for _, al := range d.metrics.Alerts {
		sev := topWarn.Render(string(al.Severity))
		if al.Severity == fleet.SeverityCritical {
			sev = topBad.Render(string(al.Severity))
		}
		fmt.Fprintf(&b, "  %s %s %s: %s\n", sev, al.Kind, al.Subject, truncate(al.Message, 80))
	}
	b.WriteString(topDim.Render("q quit · r refresh") + "\n")
	return b.String()
}
