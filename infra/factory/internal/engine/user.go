//go:build unix

package engine

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// User is the account engines run as when the factory runs as root: the
// boundary between the engine (arbitrary code) and the factory's token,
// mirrors, git configuration and credentials.
type User struct {
	Name     string
	UID, GID uint32
	Groups   []uint32
	Home     string

	gave func(rel string) // tests: called after Give gives each entry
}

// LookupUser resolves a user name or numeric uid. Root is refused: running
// engines as root is what the setting exists to avoid.
func LookupUser(s string) (*User, error) {
	u, err := user.Lookup(s)
	if err != nil {
		if _, nerr := strconv.ParseUint(s, 10, 32); nerr != nil {
			return nil, err
		}
		if u, err = user.LookupId(s); err != nil {
			return nil, err
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", s, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", s, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("user %s is root", s)
	}
	out := &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	gids, _ := u.GroupIds()
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil && n != 0 {
			out.Groups = append(out.Groups, uint32(n))
		}
	}
	return out, nil
}

func (u *User) credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
}

// Env is env for a process of u: HOME, USER and LOGNAME are u's, and git
// may work in the job's worktree although its git directory (inside the
// factory's mirror) belongs to the factory, read-only to u
// (safe.directory, given as command-line-scope configuration through
// GIT_CONFIG_COUNT, after any the environment already has).
func (u *User) Env(env []string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "HOME" || k == "USER" || k == "LOGNAME"
	})
	n := 0
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GIT_CONFIG_COUNT="); ok {
			n, _ = strconv.Atoi(v)
			env = slices.Delete(env, i, i+1)
			break
		}
	}
	return append(env, "HOME="+u.Home, "USER="+u.Name, "LOGNAME="+u.Name,
		fmt.Sprintf("GIT_CONFIG_KEY_%d=safe.directory", n), fmt.Sprintf("GIT_CONFIG_VALUE_%d=*", n),
		fmt.Sprintf("GIT_CONFIG_COUNT=%d", n+1))
}

// Give hands the tree at root to u (every file, directory and symlink
// itself, never what a symlink points to), so the engine can work in it.
//
// Processes of u may be running meanwhile (with FLEET_ENGINE_USER every
// run shares it), and may rename or link in any directory that is
// already u's. So a directory is given only after everything under it:
// every directory the walk still reads is the factory's, closed to u's
// changes. And every name is taken from its directory's descriptor (an
// os.Root per directory), so no link is followed out of the tree.
func (u *User) Give(root string) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := u.give(r, "."); err != nil {
		return fmt.Errorf("give %s to %s: %w", root, u.Name, err)
	}
	d, err := r.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Chown(int(u.UID), int(u.GID))
}

// give gives what is in dir (at rel in the tree) to u, each directory
// after its contents.
func (u *User) give(dir *os.Root, rel string) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			sub, err := dir.OpenRoot(name)
			if err != nil {
				return err
			}
			err = u.give(sub, path.Join(rel, name))
			sub.Close()
			if err != nil {
				return err
			}
		}
		if err := dir.Lchown(name, int(u.UID), int(u.GID)); err != nil {
			return err
		}
		if u.gave != nil {
			u.gave(path.Join(rel, name))
		}
	}
	return nil
}

// CheckReach reports a directory on the way to dir that u cannot pass
// through: every ancestor must be searchable by others, since u owns none
// of them.
func (u *User) CheckReach(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	var errs []error
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			errs = append(errs, fmt.Errorf("%s (mode %s) is not searchable by others, so engines running as %s cannot reach their worktrees", p, fi.Mode().Perm(), u.Name))
		}
		if p == filepath.Dir(p) {
			break
		}
	}
	return errors.Join(errs...)
}
