package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/gigafactory/fleet/infra/factory/internal/config"
	"github.com/gigafactory/fleet/infra/factory/internal/engine"
)

// Isolation between runs: a cgroup per run ends everything a run started
// when it ends (engine.Containment), and a uid per seat keeps a run out of
// the files and processes of every other run and of the factory.

// instanceName names this factory on its host: its cgroup subtree and the
// prefix of its runs' marks. The work directory makes it unique (one
// factory per work directory, by its lock) and the same across restarts.
func instanceName(cfg config.Config) string {
	sum := sha256.Sum256([]byte(cfg.WorkDir))
	id := cfg.FactoryID
	if len(id) > 64 {
		id = id[:64]
	}
	return "fleet-" + id + "-" + hex.EncodeToString(sum[:4])
}

// isolate sets up the isolation of runs at start-up and ends what an
// earlier life of this factory left running. Whatever cannot be had here
// is said, at WARN, never silently.
func (a *Agent) isolate(ctx context.Context) error {
	a.contain = engine.Contain(instanceName(a.cfg), filepath.Join(a.cfg.WorkDir, "cgroup"), a.cfg.NoRunCgroups)
	switch {
	case a.contain.Cgroups():
	case a.contain.Reaper():
		a.log.WarnContext(ctx, "runs get no cgroup of their own: each run's reaper (a child subreaper) ends what the run started, with its process group, the processes carrying the run's mark and, with "+config.EnvEngineUIDs+", every process of the seat's uid; an engine running as the factory's own uid can kill its reaper and so escape",
			"why", a.contain.NoCgroups)
	default:
		a.log.WarnContext(ctx, "runs get no cgroup of their own and no reaper: a run's processes are ended by process group, by the run's mark in their environment and, with "+config.EnvEngineUIDs+", by uid; a process that clears its environment and runs as the factory's own uid can outlive its run",
			"why", a.contain.NoCgroups)
	}
	if err := a.contain.Sweep(a.log); err != nil {
		a.log.WarnContext(ctx, "end what an earlier life of this factory left running", "err", err)
	}
	switch {
	case a.cfg.EngineUIDs.Size() > 0:
		seats, err := a.seatUIDs(ctx)
		if err != nil {
			return err
		}
		a.seats = seats
	case a.cfg.EngineUser != "":
		u, err := a.engineUser()
		if err != nil {
			return fmt.Errorf("engines cannot run as %s: %w", a.cfg.EngineUser, err)
		}
		a.runAs = u
		if a.cfg.Seats > 1 {
			a.log.WarnContext(ctx, "every run uses the one "+config.EnvEngineUser+": concurrent runs can read and write each other's worktrees; "+config.EnvEngineUIDs+" gives each seat a uid of its own",
				"user", u.Name, "seats", a.cfg.Seats)
		}
	case os.Geteuid() == 0:
		a.log.WarnContext(ctx, "engines run as root, the factory's own user: nothing separates a run from other runs or from the factory; set "+config.EnvEngineUIDs)
	default:
		a.log.WarnContext(ctx, "engines run as the factory's own uid: nothing separates a run from other runs or from the factory; a uid per seat ("+config.EnvEngineUIDs+") needs the factory to run as root",
			"uid", os.Geteuid())
	}
	a.log.InfoContext(ctx, "run isolation", "cgroups", a.contain.Cgroups(), "reaper", a.contain.Reaper(), "cgroupSubtree", a.contain.Instance,
		"seatUIDs", a.cfg.EngineUIDs.String(), "engineUser", a.cfg.EngineUser)
	return nil
}

// seatUIDs checks the factory can give each seat a uid of FLEET_ENGINE_UIDS,
// ends every process of those uids (an earlier life's runs) and closes
// the work directory to them: they pass through it to their own worktree
// and job directory, and list nothing.
func (a *Agent) seatUIDs(ctx context.Context) (*uidPool, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%s needs the factory to run as root to switch uids (it runs as uid %d)", config.EnvEngineUIDs, os.Geteuid())
	}
	r := a.cfg.EngineUIDs
	p := &uidPool{}
	for uid := r.First; ; uid++ {
		if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
			a.log.WarnContext(ctx, "a seat uid belongs to an account; every process of a seat uid is killed when a run ends", "uid", uid, "account", u.Username)
		}
		p.free = append(p.free, uid)
		if uid == r.Last {
			break
		}
	}
	// What an earlier life's runs left running as seat uids.
	for _, uid := range engine.UIDsInUse(r.First, r.Last) {
		a.log.WarnContext(ctx, "ending the processes of a seat uid an earlier life of this factory left", "uid", uid)
		if err := engine.KillUID(uid); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{a.cfg.WorkDir, a.jobsDir(), a.git.WorktreesDir(), filepath.Join(a.cfg.WorkDir, "mirrors")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, err
		}
	}
	probe := &engine.User{Name: "uid " + strconv.FormatUint(uint64(r.First), 10), UID: r.First, GID: r.First}
	if err := errors.Join(probe.CheckReach(a.git.WorktreesDir()), probe.CheckReach(a.jobsDir())); err != nil {
		return nil, err
	}
	return p, nil
}

// uidPool holds the seat uids no run uses.
type uidPool struct {
	mu   sync.Mutex
	free []uint32
}

// take gives a run a free uid. No process runs as a free uid: start-up
// ended an earlier life's, and give takes a uid back only once every
// process of it has ended, so no scan of /proc is needed here.
func (p *uidPool) take() (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		return 0, errors.New("no seat uid is free")
	}
	uid := p.free[0]
	p.free = p.free[1:]
	return uid, nil
}

// give takes a uid back once every process of it has ended; a uid whose
// processes cannot be ended is set aside.
func (p *uidPool) give(uid uint32) error {
	if err := engine.KillUID(uid); err != nil {
		return err
	}
	p.mu.Lock()
	p.free = append(p.free, uid)
	p.mu.Unlock()
	return nil
}

// runUser is the account a run's engine runs as, and what to call when
// the run is over: a seat uid of its own (HOME in its job directory), the
// one FLEET_ENGINE_USER, or nil for the factory's own.
func (jb *job) runUser() (*engine.User, func(), error) {
	a := jb.a
	if a.seats == nil {
		return a.runAs, func() {}, nil
	}
	uid, err := a.seats.take()
	if err != nil {
		return nil, nil, err
	}
	release := func() {
		if err := a.seats.give(uid); err != nil {
			jb.log.ErrorContext(jb.ctx, "processes of the run's seat uid outlived it; the uid is set aside", "uid", uid, "err", err)
		}
	}
	u := &engine.User{Name: "fleet-" + strconv.FormatUint(uint64(uid), 10), UID: uid, GID: uid, Home: filepath.Join(jb.dir, "home")}
	// The job directory is root's (the engine cannot swap the files the
	// factory reads or writes there for links) and only the seat's group
	// may pass through it; its home is its own.
	if err := errors.Join(os.Chown(jb.dir, 0, int(uid)), os.Chmod(jb.dir, 0o710), os.Mkdir(u.Home, 0o700), os.Chown(u.Home, int(uid), int(uid))); err != nil {
		release()
		return nil, nil, err
	}
	return u, release, nil
}
