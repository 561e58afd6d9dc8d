package threadwait

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pipe returns a pipe's ends, closed when the test ends, and the read
// end's RawConn.
func pipe(t *testing.T) (rc syscall.RawConn, r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	if rc, err = r.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	return rc, r, w
}

// TestWait: a pipe's read end is not ready while empty (the wait lasts
// its timeout), ready once it holds data or its writer hung up, and a
// closed file is an error.
func TestWait(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, r, w *os.File)
		ready bool
		err   bool
	}{
		{"empty", func(*testing.T, *os.File, *os.File) {}, false, false},
		{"data", func(t *testing.T, _, w *os.File) {
			if _, err := w.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
		}, true, false},
		{"writer closed", func(_ *testing.T, _, w *os.File) { w.Close() }, true, false},
		{"reader closed", func(_ *testing.T, r, _ *os.File) { r.Close() }, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, r, w := pipe(t)
			tc.setup(t, r, w)
			const timeout = 20 * time.Millisecond
			start := time.Now()
			ready, err := New().Wait(rc, timeout, false)
			if (err != nil) != tc.err || ready != tc.ready {
				t.Fatalf("Wait: ready %v, error %v; want ready %v, error %v", ready, err, tc.ready, tc.err)
			}
			if !tc.ready && !tc.err && time.Since(start) < timeout {
				t.Errorf("not ready after %v, before the %v timeout", time.Since(start), timeout)
			}
		})
	}
}

// TestWaitWakes: a wait in progress returns as soon as data arrives, not
// at its timeout.
func TestWaitWakes(t *testing.T) {
	rc, _, w := pipe(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(10 * time.Millisecond)
		w.Write([]byte{1})
	}()
	defer func() { <-done }()
	ready, err := New().Wait(rc, time.Minute, false)
	if err != nil || !ready {
		t.Fatalf("Wait: ready %v, error %v; want ready", ready, err)
	}
}

// TestWaitAllocs: Wait allocates nothing.
func TestWaitAllocs(t *testing.T) {
	rc, _, w := pipe(t)
	if _, err := w.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	p := New()
	if n := testing.AllocsPerRun(100, func() {
		if ready, err := p.Wait(rc, time.Millisecond, false); !ready || err != nil {
			t.Fatalf("Wait: ready %v, error %v", ready, err)
		}
	}); n != 0 {
		t.Errorf("%.1f allocations per Wait, want 0", n)
	}
}

// TestWaitKeepsP: with keepP the waiting goroutine is never in a system
// call as far as the runtime knows (it keeps its P), without it the
// runtime counts it as out of Go while it waits; either way data wakes
// the wait, and the world can stop (garbage collection) during one.
func TestWaitKeepsP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, keepP := range []bool{false, true} {
		t.Run(fmt.Sprintf("keepP=%v", keepP), func(t *testing.T) {
			rc, _, w := pipe(t)
			var stop atomic.Bool
			woke := make(chan error, 1)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				p := New()
				for !stop.Load() {
					ready, err := p.Wait(rc, time.Minute, keepP)
					if err != nil || ready {
						woke <- err
						return
					}
				}
				woke <- nil
			}()
			// 20 samples over about 100 ms of waiting.
			sample := []metrics.Sample{{Name: "/sched/goroutines/not-in-go:goroutines"}}
			out := 0
			for range 20 {
				time.Sleep(5 * time.Millisecond)
				metrics.Read(sample)
				if sample[0].Value.Uint64() > 0 {
					out++
				}
			}
			runtime.GC()
			if _, err := w.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			if err := <-woke; err != nil {
				t.Fatalf("Wait: %v", err)
			}
			switch {
			case keepP && out != 0:
				t.Errorf("keeping its P, the waiter was out of Go in %d of 20 samples, want none", out)
			case !keepP && out < 10:
				t.Errorf("giving its P back, the waiter was out of Go in %d of 20 samples, want most", out)
			}
		})
	}
}
