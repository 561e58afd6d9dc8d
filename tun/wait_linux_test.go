package tun

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestWaitReadable, for both backends: a wait on an empty queue times
// out, a packet the kernel routes into the interface makes it report
// ready without consuming it, and a closed device reports ErrClosed.
func TestWaitReadable(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(name string) (Device, error)
	}{
		{"offload", func(name string) (Device, error) { return OpenOffload(OffloadConfig{Name: name, MTU: 1420}, nil) }},
		{"water", func(name string) (Device, error) { return OpenWater(WaterConfig{Name: name, MTU: 1420}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireNetns(t)
			name := "bl-w" + tc.name[:3]
			d, err := tc.open(name)
			if err != nil {
				if tc.name == "offload" && os.Getenv("CI") == "" {
					t.Skip(err)
				}
				t.Fatal(err)
			}
			defer d.Close()
			w := d.(interface {
				WaitReadable(time.Duration, bool) (bool, error)
			})
			ip(t, "addr", "add", "10.78.0.1/24", "dev", name)
			ip(t, "link", "set", name, "up")
			// Router solicitations and the like may arrive after up:
			// read until the queue is quiet.
			bufs, sizes := [][]byte{make([]byte, 65536)}, []int{0}
			for {
				ready, err := w.WaitReadable(200*time.Millisecond, false)
				if err != nil {
					t.Fatal(err)
				}
				if !ready {
					break
				}
				if _, err := d.Read(bufs, sizes, testOffset); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			if ready, err := w.WaitReadable(30*time.Millisecond, false); ready || err != nil {
				t.Fatalf("empty queue: ready=%v err=%v, want a timeout", ready, err)
			}
			if el := time.Since(start); el < 25*time.Millisecond {
				t.Errorf("a 30 ms wait returned after %v", el)
			}
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 78, 0, 2), Port: 9})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte("wake")); err != nil {
				t.Fatal(err)
			}
			for range 2 { // the wait consumes nothing
				if ready, err := w.WaitReadable(5*time.Second, false); !ready || err != nil {
					t.Fatalf("queued packet: ready=%v err=%v", ready, err)
				}
			}
			if n, err := d.Read(bufs, sizes, testOffset); err != nil || n != 1 || sizes[0] != 20+8+4 {
				t.Fatalf("Read after the wait: n=%d size=%d err=%v, want the 32-byte datagram", n, sizes[0], err)
			}
			d.Close()
			if _, err := w.WaitReadable(time.Millisecond, false); !errors.Is(err, ErrClosed) {
				t.Errorf("wait after Close: %v, want ErrClosed", err)
			}
		})
	}
}
