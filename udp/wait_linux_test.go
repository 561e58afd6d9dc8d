package udp

import (
	"errors"
	"testing"
	"time"
)

// TestWaitReadable: a wait on an empty socket times out, a queued
// datagram (plain or coalesced) makes it report ready without consuming
// anything, and a closed bind reports ErrClosed, also to a wait in
// progress by the end of its timeout. The wait allocates nothing.
func TestWaitReadable(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"plain", Options{noGRO: true}},
		{"gro", Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := listen(t, "127.0.0.1:0", Options{}), listen(t, "127.0.0.1:0", tc.opts)
			start := time.Now()
			if ready, err := b.WaitReadable(30*time.Millisecond, false); ready || err != nil {
				t.Fatalf("empty socket: ready=%v err=%v, want a timeout", ready, err)
			}
			if d := time.Since(start); d < 25*time.Millisecond {
				t.Errorf("a 30 ms wait returned after %v", d)
			}
			out := [][]byte{make([]byte, 100), make([]byte, 100), make([]byte, 100)}
			if err := a.Send(out, b.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			if ready, err := b.WaitReadable(5*time.Second, false); !ready || err != nil {
				t.Fatalf("queued datagrams: ready=%v err=%v", ready, err)
			}
			in := newBatch(1, 2000)
			if err := receiveN(b, in, 1); err != nil {
				t.Fatal(err)
			}
			// Two are left: in the socket, or kept from a coalesced run.
			if ready, err := b.WaitReadable(time.Second, false); !ready || err != nil {
				t.Fatalf("after one of three was received: ready=%v err=%v", ready, err)
			}
			if err := receiveN(b, newBatch(2, 2000), 2); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(5, func() { _, _ = b.WaitReadable(time.Millisecond, false) }); n != 0 {
				t.Errorf("%.1f allocations per wait, want 0", n)
			}
			done := make(chan error, 1)
			go func() {
				for {
					if _, err := b.WaitReadable(50*time.Millisecond, false); err != nil {
						done <- err
						return
					}
				}
			}()
			time.Sleep(20 * time.Millisecond)
			_ = b.Close()
			select {
			case err := <-done:
				if !errors.Is(err, ErrClosed) {
					t.Errorf("wait after Close: %v, want ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a wait in progress did not end after Close")
			}
		})
	}
}
