package daemon

import (
	"log/slog"
	"os"
	"runtime"
)

// expressProcs raises GOMAXPROCS by loops, the express lane's loops that
// run on real-time threads (router.Options.ExpressPriority: 2 with
// steering, else 1), and returns what undoes it, which Run defers, and
// whether it did: then each loop keeps its P to itself
// (router.Options.ExpressKeepsP).
//
// Each such loop waits for packets in a blocking system call on a thread
// of its own, and needs a P the moment it wakes. With GOMAXPROCS at the
// number of CPUs and the bulk lanes busy, there is none: the woken thread
// parks until the scheduler takes one from a bulk goroutine, which then
// waits in turn. Measured on this 2-core machine with one TCP stream
// (interleaved bhbench runs, bench/README.md "Real-time express loops"):
// at GOMAXPROCS=2 the loaded ping's p50 was 0.77–1.15 ms and its p99
// 4.6–7.5 ms; with two Ps more, 0.57–0.86 ms and 2.8–5.0 ms.
// A loop that gave its P back while it waited left it to the bulk lanes,
// which then ran on more threads than cores, for 8–19 % more CPU per
// byte; keeping it (package threadwait) leaves them the Ps they had.
// A GOMAXPROCS set in the environment is left alone, and the loops then
// share its Ps.
func expressProcs(loops int, log *slog.Logger) (undo func(), raised bool) {
	if loops <= 0 {
		return func() {}, false
	}
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		log.Info("GOMAXPROCS set in the environment; the express lane's real-time loops share its Ps", "GOMAXPROCS", v, "loops", loops)
		return func() {}, false
	}
	prev := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(prev + loops)
	log.Info("GOMAXPROCS raised for the express lane's real-time loops, one P each", "from", prev, "to", prev+loops)
	return runtime.SetDefaultGOMAXPROCS, true
}

// expressLoops is how many express loops the router runs on real-time
// threads with these lanes and priority.
func expressLoops(ld *laneDevices, priority int) int {
	switch {
	case ld.express == nil || priority == 0:
		return 0
	case ld.steered:
		return 2
	}
	return 1
}
