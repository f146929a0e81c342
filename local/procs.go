package main

import (
	"cmp"
	"os"
	"runtime"
	"strconv"
)

// stackProcs is the GOMAXPROCS of fleet-local and of the handler it starts:
// half the CPUs Go would use (at least one), unless GOMAXPROCS is set, in
// which case both keep it (in local.settings.json it is the handler's).
//
// Why: the two processes share the machine with each other, the NATS
// server inside fleet-local, and the factories and agents on it. Sized to
// every CPU, an idle Go process woken by one request also starts a second
// thread to look for more work, which finds none. On the 2-CPU machine of
// docs/performance.md, ten paired `make bench` runs gave 3 to 37 % less CPU
// per lifecycle (median 17 %) and more lifecycles a second in nine of ten.
func stackProcs(defaultProcs int, env string) (n int, set bool) {
	if env != "" {
		return 0, false
	}
	return max(1, defaultProcs/2), true
}

// limitProcs applies stackProcs to this process and returns the setting
// for the handler's environment ("" when GOMAXPROCS is the user's, in the
// environment or in the app settings).
func limitProcs(settings map[string]string) string {
	n, set := stackProcs(runtime.GOMAXPROCS(0), cmp.Or(os.Getenv("GOMAXPROCS"), settings["GOMAXPROCS"]))
	if !set {
		return ""
	}
	runtime.GOMAXPROCS(n)
	return "GOMAXPROCS=" + strconv.Itoa(n)
}
