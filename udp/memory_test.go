package udp

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var (
	memA = netip.MustParseAddrPort("192.0.2.1:51820")
	memB = netip.MustParseAddrPort("[2001:db8::2]:51820")
)

func TestMemoryPair(t *testing.T) {
	a, b := NewPair(memA, memB)
	defer a.Close()
	defer b.Close()
	if a.LocalAddr() != memA || b.LocalAddr() != memB || a.BatchSize() != memoryBatch {
		t.Fatalf("LocalAddr %v/%v BatchSize %d", a.LocalAddr(), b.LocalAddr(), a.BatchSize())
	}
	out := [][]byte{[]byte("one"), []byte("two"), []byte("three")}
	if err := a.Send(out, memB); err != nil {
		t.Fatal(err)
	}
	out[0][0] = 'X' // Send copied: this must not show up.
	bufs := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 64)}
	sizes := make([]int, 4)
	eps := make([]netip.AddrPort, 4)
	n, err := b.Receive(bufs, sizes, eps)
	if n != 3 || err != nil {
		t.Fatalf("Receive = %d, %v", n, err)
	}
	for i, want := range []string{"one", "two", "three"} {
		if got := string(bufs[i][:sizes[i]]); got != want || eps[i] != memA {
			t.Errorf("datagram %d = %q from %v", i, got, eps[i])
		}
	}

	// Replies reach a, also when addressed in v4-mapped form.
	mapped := netip.AddrPortFrom(netip.AddrFrom16(memA.Addr().As16()), memA.Port())
	if err := b.Send([][]byte{[]byte("back")}, mapped); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Receive(bufs, sizes, eps); n != 1 || err != nil || string(bufs[0][:sizes[0]]) != "back" || eps[0] != memB {
		t.Errorf("reply: %d, %v, %q from %v", n, err, bufs[0][:sizes[0]], eps[0])
	}

	// Anything else is dropped and counted.
	if err := a.Send(out, netip.MustParseAddrPort("192.0.2.9:1")); err != nil {
		t.Fatal(err)
	}
	if a.Dropped() != 3 {
		t.Errorf("Dropped = %d, want 3", a.Dropped())
	}

	// Truncation, as with UDP.
	_ = a.Send([][]byte{bytes.Repeat([]byte{7}, 100)}, memB)
	if n, err := b.Receive([][]byte{make([]byte, 10)}, sizes, eps); n != 1 || err != nil || sizes[0] != 10 {
		t.Errorf("truncated receive: %d, %v, size %d", n, err, sizes[0])
	}
	if _, err := b.Receive(nil, nil, nil); err != errNoBuffer {
		t.Errorf("Receive without buffers: %v", err)
	}
}

func TestMemoryClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	a, b := NewPair(memA, memB)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Receive([][]byte{make([]byte, 8)}, make([]int, 1), make([]netip.AddrPort, 1))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = b.Close()
	_ = b.Close()
	select {
	case err := <-errc:
		if err != ErrClosed {
			t.Errorf("blocked Receive returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Receive")
	}
	// Sending to a closed peer drops silently; a closed end cannot send.
	if err := a.Send([][]byte{{1}, {2}}, memB); err != nil || a.Dropped() != 2 {
		t.Errorf("Send to closed peer: %v, dropped %d", err, a.Dropped())
	}
	if err := b.Send([][]byte{{1}}, memA); err != ErrClosed {
		t.Errorf("Send on closed end: %v", err)
	}

	// A Send blocked on a full queue is released by Close.
	c, d := NewPair(memA, memB)
	for range memoryQueue {
		if err := c.Send([][]byte{{0}}, memB); err != nil {
			t.Fatal(err)
		}
	}
	go func() { errc <- c.Send([][]byte{{1}}, memB) }()
	time.Sleep(20 * time.Millisecond)
	_ = c.Close()
	if err := <-errc; err != ErrClosed {
		t.Errorf("blocked Send returned %v", err)
	}
	_ = d.Close()
	_ = a.Close()
}

func TestMemoryConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t)
	a, b := NewPair(memA, memB)
	defer a.Close()
	defer b.Close()
	const senders, per = 4, 1000
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if err := a.Send([][]byte{{byte(s), byte(i)}}, memB); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	bufs := make([][]byte, b.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, 8)
	}
	sizes := make([]int, len(bufs))
	eps := make([]netip.AddrPort, len(bufs))
	for got := 0; got < senders*per; {
		n, err := b.Receive(bufs, sizes, eps)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	wg.Wait()
}

func TestMemoryNoAllocs(t *testing.T) {
	a, b := NewPair(memA, memB)
	defer a.Close()
	defer b.Close()
	out := make([][]byte, 64)
	in := make([][]byte, 64)
	for i := range out {
		out[i] = make([]byte, 1420)
		in[i] = make([]byte, 2048)
	}
	sizes := make([]int, 64)
	eps := make([]netip.AddrPort, 64)
	allocs := testing.AllocsPerRun(100, func() {
		if err := a.Send(out, memB); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(out); {
			n, err := b.Receive(in[got:], sizes[got:], eps[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	})
	if allocs != 0 {
		t.Errorf("Send+Receive of 64 allocates %v times", allocs)
	}
}
