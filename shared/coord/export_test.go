package coord

// SetSweepPage sets how many jobs a sweep query reads at most, so a test
// shows a backlog larger than the page with a few dozen jobs.
func SetSweepPage(c *Coordinator, n int) { c.sweeps.Page = n }
