package sched

import (
	"sync"
	"time"
)

// Keeper applies a Policy to a set of processes now and again every
// interval until Stop, so that a thread created while Apply listed the
// tasks is caught on the next pass. Its state is written by its own
// goroutine and read by Stop after that goroutine ended.
type Keeper struct {
	p    Policy
	pids []int
	stop chan struct{}
	done chan struct{}

	mu  sync.Mutex
	err error // the first error of any pass
}

// Keep applies p to every thread of pids at once and then every interval
// until Stop. The first pass's error is returned (and the Keeper is not
// started), so that a policy the kernel refuses stops the run.
func Keep(p Policy, interval time.Duration, pids ...int) (*Keeper, error) {
	k := &Keeper{p: p, pids: pids, stop: make(chan struct{}), done: make(chan struct{})}
	if err := k.pass(); err != nil {
		return nil, err
	}
	go k.loop(interval)
	return k, nil
}

func (k *Keeper) pass() error {
	var first error
	for _, pid := range k.pids {
		_, err := k.p.Apply(pid)
		k.mu.Lock()
		if err != nil && k.err == nil {
			k.err = err
		}
		k.mu.Unlock()
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (k *Keeper) loop(interval time.Duration) {
	defer close(k.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.pass()
		}
	}
}

// Stop ends the passes and returns the first error any of them met (a
// process that has exited is one). Safe to call more than once.
func (k *Keeper) Stop() error {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}
