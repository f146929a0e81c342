//go:build linux

package engine

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupDrainWait bounds how long a killed cgroup gets to empty: a
// process in uninterruptible sleep (a hung NFS read) only dies when it
// wakes up.
const cgroupDrainWait = 5 * time.Second

// Cgroups is the factory's subtree of the cgroup v2 hierarchy: one child
// per run, so every process a run starts (whatever it does: setsid, a
// double fork, a daemon) is in that child and ends with it. The engine is
// cloned straight into its cgroup (CLONE_INTO_CGROUP), so no fork can
// happen outside it, and a process running as a seat uid cannot move
// itself out (cgroupfs is root's).
//
// The subtree sits beneath the factory's own cgroup. cgroup v2's rule
// that a cgroup with controllers enabled for its children holds no
// processes of its own does not bite: the subtree holds no process and
// enables no controller, and the run cgroups are leaves.
type Cgroups struct {
	dir string
}

// OpenCgroups makes (or reuses) the subtree name beneath the factory's own
// cgroup and proves it works: a probe process is cloned into a child
// cgroup, which is then killed and removed. An error says why cgroups
// cannot be used here.
func OpenCgroups(name string) (*Cgroups, error) {
	parent, err := ownCgroupDir()
	if err != nil {
		return nil, err
	}
	c := &Cgroups{dir: filepath.Join(parent, name)}
	if err := os.Mkdir(c.dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create cgroup %s: %w", c.dir, err)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "cgroup.kill")); err != nil {
		return nil, fmt.Errorf("cgroup %s has no cgroup.kill (Linux 5.14 or later is needed): %w", c.dir, err)
	}
	if err := c.probe(); err != nil {
		return nil, err
	}
	return c, nil
}

// Dir is the subtree's directory under the cgroup2 mount.
func (c *Cgroups) Dir() string { return c.dir }

// probe clones a short process into a fresh child cgroup and removes it.
func (c *Cgroups) probe() error {
	g, err := c.Create(fmt.Sprintf("probe-%d", os.Getpid()))
	if err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	g.apply(cmd.SysProcAttr)
	runErr := cmd.Run()
	if err := g.Remove(); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr != nil {
		return fmt.Errorf("start a process in cgroup %s (clone3 CLONE_INTO_CGROUP): %w", g.dir, runErr)
	}
	return nil
}

// Cgroup is one run's cgroup.
type Cgroup struct {
	dir string
	fd  *os.File
}

// Create makes the child cgroup name. A child of that name left over
// (by a factory killed before it could remove it) is ended first.
func (c *Cgroups) Create(name string) (*Cgroup, error) {
	if name == "" || strings.ContainsRune(name, '/') || strings.HasPrefix(name, "cgroup.") || strings.HasPrefix(name, ".") {
		return nil, fmt.Errorf("cgroup name %q", name)
	}
	g := &Cgroup{dir: filepath.Join(c.dir, name)}
	err := os.Mkdir(g.dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		if err := g.Remove(); err != nil {
			return nil, err
		}
		err = os.Mkdir(g.dir, 0o755)
	}
	if err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	g.fd, err = os.OpenFile(g.dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		_ = os.Remove(g.dir)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return g, nil
}

// Dir is the cgroup's directory.
func (g *Cgroup) Dir() string { return g.dir }

// apply has a process started with attr cloned into g.
func (g *Cgroup) apply(attr *syscall.SysProcAttr) {
	attr.UseCgroupFD = true
	attr.CgroupFD = int(g.fd.Fd())
}

// Kill ends every process in g at once (cgroup.kill sends SIGKILL to all
// of them, and to any forked meanwhile) and waits, bounded, until the
// kernel reports g empty.
func (g *Cgroup) Kill() error {
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // already removed
		}
		return fmt.Errorf("kill cgroup %s: %w", g.dir, err)
	}
	deadline := time.Now().Add(cgroupDrainWait)
	for {
		populated, err := g.populated()
		if err != nil || !populated {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %s after it was killed", g.dir, cgroupDrainWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// populated reads cgroup.events: whether g or a descendant holds a
// process.
func (g *Cgroup) populated() (bool, error) {
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.events"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "populated "); ok {
			return v != "0", nil
		}
	}
	return false, fmt.Errorf("cgroup %s: no populated line in cgroup.events", g.dir)
}

// Remove kills what is left in g and removes it. Safe more than once.
func (g *Cgroup) Remove() error {
	killErr := g.Kill()
	if g.fd != nil {
		_ = g.fd.Close()
		g.fd = nil
	}
	if err := os.Remove(g.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errors.Join(killErr, fmt.Errorf("remove cgroup: %w", err))
	}
	return killErr
}

// Sweep ends and removes every run cgroup in the subtree: what a previous
// life of the factory, killed with -9, left running. It returns the names
// it removed.
func (c *Cgroups) Sweep() ([]string, error) {
	return sweepCgroupDir(c.dir)
}

func sweepCgroupDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		g := &Cgroup{dir: filepath.Join(dir, e.Name())}
		if err := g.Remove(); err != nil {
			errs = append(errs, err)
			continue
		}
		names = append(names, e.Name())
	}
	return names, errors.Join(errs...)
}

// SweepCgroupTree ends every run cgroup under dir, a subtree an earlier
// life of the factory recorded, and removes dir itself: it is removed
// only if it is a cgroup (inside a cgroup2 mount).
func SweepCgroupTree(dir string) ([]string, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil, nil
		}
		return nil, err
	}
	if st.Type != cgroup2Magic {
		return nil, fmt.Errorf("%s is not in a cgroup2 file system", dir)
	}
	names, err := sweepCgroupDir(dir)
	if rerr := os.Remove(dir); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return names, err
}

// cgroup2Magic is CGROUP2_SUPER_MAGIC.
const cgroup2Magic = 0x63677270

// Close removes the subtree; it fails (harmlessly) while runs are in it.
func (c *Cgroups) Close() error {
	return os.Remove(c.dir)
}

// ownCgroupDir is the directory of the factory's own cgroup: the cgroup2
// mount (from /proc/self/mountinfo: /sys/fs/cgroup on a unified host,
// /sys/fs/cgroup/unified on a hybrid one) joined with the path
// /proc/self/cgroup gives ("0::/path").
func ownCgroupDir() (string, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	own := ""
	for line := range strings.Lines(string(cg)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return "", errors.New("this process is in no cgroup v2 hierarchy (/proc/self/cgroup has no 0:: line)")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	mnt, root, ok := cgroup2Mount(string(mi), own)
	if !ok {
		return "", errors.New("no cgroup2 file system is mounted (see /proc/self/mountinfo)")
	}
	rel := own
	if root != "/" {
		// A mount of a sub-tree (a container without a cgroup namespace):
		// the path is below the mount's root.
		r, ok := strings.CutPrefix(own, root)
		if !ok || (r != "" && !strings.HasPrefix(r, "/")) {
			return "", fmt.Errorf("the cgroup2 mount at %s (root %s) does not hold this process's cgroup %s", mnt, root, own)
		}
		rel = r
	}
	return filepath.Join(mnt, rel), nil
}

// cgroup2Mount finds the cgroup2 mount in mountinfo whose root holds the
// cgroup own: its mount point and root.
func cgroup2Mount(mountinfo, own string) (mnt, root string, ok bool) {
	for line := range strings.Lines(mountinfo) {
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		r, m := unescapeMount(f[3]), unescapeMount(f[4])
		if r == "/" || own == r || strings.HasPrefix(own, r+"/") {
			return m, r, true
		}
	}
	return "", "", false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
