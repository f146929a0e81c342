//go:build unix

package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// MarkEnv is set in the environment of everything a run starts, to
// "<instance>/<run>": where cgroups cannot be used, the processes still
// carrying it are what the factory ends when the run ends, and what a
// restarted factory ends of its previous life.
const MarkEnv = "FLEET_RUN_MARK"

// Containment is how this factory ends every process of a run when the
// run ends: a cgroup v2 per run (cgroup.kill) where it can write cgroups,
// else a kill of every process carrying the run's mark. Seat uids, where
// the factory has them, are ended by the agent besides.
type Containment struct {
	// Instance names this factory on the host: its cgroup subtree and the
	// prefix of its runs' marks.
	Instance string
	cg       *Cgroups
	// NoCgroups says why cgroups are not used; empty when they are.
	NoCgroups string
	record    string
	// reaper is the binary that acts as a run's reaper where there is no
	// cgroup, "" for none (MaybeReaper was not called).
	reaper string
}

// Contain sets up the containment of a factory: instance names it (unique
// per work directory), record is a file that remembers where its cgroup
// subtree is, so a later life finds it even from another cgroup. With
// noCgroups it uses the fallback although cgroups may work.
func Contain(instance, record string, noCgroups bool) *Containment {
	c := &Containment{Instance: instance, record: record, reaper: reaperExe}
	if noCgroups {
		c.NoCgroups = "turned off"
		return c
	}
	cg, err := OpenCgroups(instance)
	if err != nil {
		c.NoCgroups = err.Error()
		return c
	}
	c.cg = cg
	if err := os.WriteFile(record, []byte(cg.Dir()+"\n"), 0o600); err != nil {
		c.NoCgroups = fmt.Sprintf("record the cgroup subtree in %s: %v", record, err)
		c.cg = nil
	}
	return c
}

// Reaper reports whether runs without a cgroup get a reaper.
func (c *Containment) Reaper() bool { return c != nil && c.cg == nil && c.reaper != "" }

// Cgroups reports whether runs get a cgroup each.
func (c *Containment) Cgroups() bool { return c != nil && c.cg != nil }

// Mark is the mark of a run.
func (c *Containment) Mark(run string) string { return c.Instance + "/" + run }

// Sweep ends what an earlier life of this factory left running: every run
// cgroup of its subtree (the one it recorded, and the current one) and
// every process carrying one of its marks.
func (c *Containment) Sweep(log *slog.Logger) error {
	var errs []error
	if b, err := os.ReadFile(c.record); err == nil {
		if old := strings.TrimSpace(string(b)); old != "" && filepath.Base(old) == c.Instance && (c.cg == nil || old != c.cg.Dir()) {
			names, err := SweepCgroupTree(old)
			errs = append(errs, err)
			if len(names) > 0 {
				log.Warn("ended run cgroups an earlier life of this factory left", "cgroups", names, "subtree", old)
			}
		}
	}
	if c.cg != nil {
		names, err := c.cg.Sweep()
		errs = append(errs, err)
		if len(names) > 0 {
			log.Warn("ended run cgroups an earlier life of this factory left", "cgroups", names, "subtree", c.cg.Dir())
		}
	}
	killed, err := KillMarked(c.Instance+"/", true)
	errs = append(errs, err)
	if len(killed) > 0 {
		log.Warn("ended processes an earlier life of this factory left", "pids", killed)
	}
	return errors.Join(errs...)
}

// Close removes the cgroup subtree, empty once every run has ended.
func (c *Containment) Close() error {
	if c.cg == nil {
		return nil
	}
	if err := c.cg.Close(); err != nil {
		return err
	}
	return os.Remove(c.record)
}

// runJail is one run's containment while it runs.
type runJail struct {
	mark   string
	cg     *Cgroup
	reaper string
}

// jail prepares the containment of one run.
func (c *Containment) jail(run string) (*runJail, error) {
	if c == nil || run == "" {
		return nil, nil
	}
	j := &runJail{mark: c.Mark(run), reaper: c.reaper}
	if c.cg != nil {
		g, err := c.cg.Create(run)
		if err != nil {
			return nil, err
		}
		j.cg = g
	}
	return j, nil
}

// end ends every process of the run and removes its cgroup.
func (j *runJail) end() error {
	if j == nil {
		return nil
	}
	if j.cg != nil {
		return j.cg.Remove()
	}
	_, err := KillMarked(j.mark, false)
	return err
}
