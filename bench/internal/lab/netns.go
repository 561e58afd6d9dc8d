package lab

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on an OS thread moved into the named network namespace
// (/run/netns/NAME, as `ip netns add` makes it). Sockets fn opens belong
// to that namespace for their whole life, wherever they are used later.
func InNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is handed back to the runtime only if it returns to
		// the original namespace; otherwise it dies with this goroutine.
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + name)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := setns(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}
