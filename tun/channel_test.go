package tun

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestChannelInjectRead(t *testing.T) {
	c := NewChannelBatch("bh-test", 1420, 4)
	defer c.Close()
	if c.Name() != "bh-test" || c.MTU() != 1420 || c.BatchSize() != 4 {
		t.Fatalf("Name/MTU/BatchSize = %q/%d/%d", c.Name(), c.MTU(), c.BatchSize())
	}
	src := []byte("packet-0")
	for i := range 6 {
		src[7] = byte('0' + i)
		if err := c.Inject(src); err != nil {
			t.Fatal(err)
		}
	}
	src[7] = 'X' // Inject copied: this must not show up.

	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 64)
	}
	sizes := make([]int, len(bufs))
	n, err := c.Read(bufs, sizes, testOffset)
	if n != 4 || err != nil {
		t.Fatalf("first Read = %d, %v; want the full batch of 4", n, err)
	}
	n2, err := c.Read(bufs[n:], sizes[n:], testOffset)
	if n2 != 2 || err != nil {
		t.Fatalf("second Read = %d, %v; want the 2 left", n2, err)
	}
	for i := range n + n2 {
		want := fmt.Sprintf("packet-%d", i)
		if got := string(bufs[i][testOffset : testOffset+sizes[i]]); got != want {
			t.Errorf("packet %d = %q, want %q", i, got, want)
		}
	}
}

func TestChannelWriteOutbound(t *testing.T) {
	c := NewChannel("bh-test", 1420)
	defer c.Close()
	if c.BatchSize() != DefaultChannelBatch {
		t.Fatalf("BatchSize = %d", c.BatchSize())
	}
	bufs := [][]byte{[]byte("hdr-one"), []byte("hdr-two")}
	if n, err := c.Write(bufs, 4); n != 2 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	bufs[0][4] = 'X' // Write copied: this must not show up.
	for _, want := range []string{"one", "two"} {
		select {
		case got := <-c.Outbound():
			if string(got) != want {
				t.Errorf("outbound %q, want %q", got, want)
			}
			c.Release(got)
		default:
			t.Fatalf("outbound packet %q missing", want)
		}
	}
}

func TestChannelShortBufferAndBadArgs(t *testing.T) {
	c := NewChannel("bh-test", 1420)
	defer c.Close()
	_ = c.Inject(bytes.Repeat([]byte{1}, 100))
	_ = c.Inject([]byte{2})
	bufs := [][]byte{make([]byte, 50), make([]byte, 50)}
	sizes := make([]int, 2)
	if n, err := c.Read(bufs, sizes, 0); n != 0 || err != io.ErrShortBuffer {
		t.Errorf("Read of an oversized packet = %d, %v", n, err)
	}
	if n, err := c.Read(bufs, sizes, 0); n != 1 || err != nil || sizes[0] != 1 {
		t.Errorf("Read after the drop = %d, %v, size %d", n, err, sizes[0])
	}
	if _, err := c.Read(nil, nil, 0); err != errNoBuffer {
		t.Errorf("Read(nil) = %v", err)
	}
	if _, err := c.Read(bufs, sizes, -1); err != errBadOffset {
		t.Errorf("Read with a negative offset = %v", err)
	}
	if n, err := c.Write([][]byte{make([]byte, 3)}, 4); n != 0 || err != errBadOffset {
		t.Errorf("Write past the buffer = %d, %v", n, err)
	}
}

func TestChannelCloseUnblocks(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := NewChannelBatch("bh-test", 1420, 1)
	// Fill both queues so that Inject and Write block too.
	for range channelQueue {
		if err := c.Inject([]byte{0}); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Write([][]byte{{0}}, 0); n != 1 || err != nil {
			t.Fatal(n, err)
		}
	}
	empty := NewChannel("bh-empty", 1420)

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Add(3)
	go func() {
		defer wg.Done()
		_, err := empty.Read([][]byte{make([]byte, 10)}, make([]int, 1), 0)
		errs <- err
	}()
	go func() { defer wg.Done(); errs <- c.Inject([]byte{1}) }()
	go func() {
		defer wg.Done()
		_, err := c.Write([][]byte{{1}}, 0)
		errs <- err
	}()
	time.Sleep(50 * time.Millisecond)
	_ = empty.Close()
	_ = c.Close()
	_ = c.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != ErrClosed {
			t.Errorf("unblocked call returned %v, want ErrClosed", err)
		}
	}
	if _, err := c.Read([][]byte{make([]byte, 10)}, make([]int, 1), 0); err != ErrClosed {
		t.Errorf("Read after Close with packets queued = %v, want ErrClosed", err)
	}
}

func TestChannelConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := NewChannel("bh-test", 1420)
	const writers, per = 4, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pkt := []byte{byte(w), 0}
			for i := range per {
				pkt[1] = byte(i)
				if err := c.Inject(pkt); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	bufs := make([][]byte, c.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, 16)
	}
	sizes := make([]int, len(bufs))
	for got := 0; got < writers*per; {
		n, err := c.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Echo them back out, as a router would, on this goroutine.
		if _, err := c.Write(bufs[:n], 0); err != nil {
			t.Fatal(err)
		}
		for range n {
			c.Release(<-c.Outbound())
		}
		got += n
	}
	wg.Wait()
	_ = c.Close()
}

func TestChannelNoAllocs(t *testing.T) {
	c := NewChannel("bh-test", 1420)
	defer c.Close()
	pkt := make([]byte, 1420)
	bufs := [][]byte{make([]byte, testOffset+1420)}
	sizes := make([]int, 1)
	allocs := testing.AllocsPerRun(100, func() {
		_ = c.Inject(pkt)
		if n, err := c.Read(bufs, sizes, testOffset); n != 1 || err != nil {
			t.Fatal(n, err)
		}
		if n, err := c.Write(bufs, testOffset); n != 1 || err != nil {
			t.Fatal(n, err)
		}
		c.Release(<-c.Outbound())
	})
	if allocs != 0 {
		t.Errorf("Inject+Read+Write allocates %v times per round", allocs)
	}
}
