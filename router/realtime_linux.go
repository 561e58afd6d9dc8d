package router

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// realtimeThread locks the calling goroutine to its OS thread for good
// and makes the thread SCHED_FIFO at prio; threads it creates start as
// ordinary ones. The goroutine calls the returned release before it
// exits, which gives the thread back its ordinary policy: the runtime
// ends a thread whose goroutine exits locked, except the process's main
// thread, which it parks instead. The lock holds even if the priority is
// refused.
func realtimeThread(prio int) (release func(), err error) {
	runtime.LockOSThread()
	old, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return func() {}, err
	}
	err = unix.SchedSetAttr(0, &unix.SchedAttr{
		Size:     unix.SizeofSchedAttr,
		Policy:   unix.SCHED_FIFO,
		Priority: uint32(prio),
		Flags:    unix.SCHED_FLAG_RESET_ON_FORK,
	}, 0)
	if err != nil {
		return func() {}, err
	}
	return func() { _ = unix.SchedSetAttr(0, old, 0) }, nil
}
