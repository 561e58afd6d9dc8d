package threadwait

import (
	"os"
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
			ready, err := New().Wait(rc, timeout)
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
	ready, err := New().Wait(rc, time.Minute)
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
		if ready, err := p.Wait(rc, time.Millisecond); !ready || err != nil {
			t.Fatalf("Wait: ready %v, error %v", ready, err)
		}
	}); n != 0 {
		t.Errorf("%.1f allocations per Wait, want 0", n)
	}
}
