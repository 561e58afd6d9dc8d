package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on a thread that entered the lab namespace ns. The
// thread is never returned to the runtime (the goroutine exits locked),
// so no other goroutine runs in ns by mistake.
func (l *lab) inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + l.ns(ns))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// capture counts the frames on every interface of lab namespace ns (its
// TUN included) that contain marker, until stop is called, which returns
// the count and how many frames were seen.
func (l *lab) capture(ns string, marker []byte) (stop func() (hits, frames int)) {
	l.t.Helper()
	var (
		mu           sync.Mutex
		hits, frames int
		done         = make(chan struct{})
		ready        = make(chan error, 1)
		finished     = make(chan struct{})
	)
	go func() {
		defer close(finished)
		err := l.inNetns(ns, func() error {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			tv := unix.Timeval{Usec: 100000}
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				return err
			}
			ready <- nil
			buf := make([]byte, 1<<16)
			for {
				select {
				case <-done:
					return nil
				default:
				}
				n, _, err := unix.Recvfrom(fd, buf, 0)
				if err != nil {
					continue
				}
				mu.Lock()
				frames++
				if bytes.Contains(buf[:n], marker) {
					hits++
				}
				mu.Unlock()
			}
		})
		if err != nil {
			ready <- err
		}
	}()
	if err := <-ready; err != nil {
		l.t.Fatalf("capture in %s: %v", ns, err)
	}
	return func() (int, int) {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return hits, frames
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// checkHubBlind sends a plaintext marker in UDP datagrams from pod E1 to
// pod E2 and checks that it arrives there, and appears on no interface
// of the hub's namespace (WAN, LAN, its TUN) nor on the WAN bridge.
func (l *lab) checkHubBlind() {
	l.t.Helper()
	var rnd [8]byte
	rand.Read(rnd[:])
	marker := []byte("bridgehead plaintext marker " + hex.EncodeToString(rnd[:]))
	stopHub := l.capture("a-gw", marker)
	stopWAN := l.capture("wan", marker)
	stopE2 := l.capture("e2-node", marker)
	before := metric(l.metrics("a"), `bridgehead_transit_datagrams_total{direction="forwarded"}`)
	err := l.inNetns("e1-node", func() error {
		// Unconnected: pod E2's port unreachable answers must not
		// fail the next write.
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(natPods["e1"])})
		if err != nil {
			return err
		}
		defer c.Close()
		to := &net.UDPAddr{IP: net.ParseIP(natPods["e2"]), Port: 40009}
		for range 20 {
			if _, err := c.WriteToUDP(marker, to); err != nil {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		l.t.Fatalf("sending the marker from pod E1: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	hubHits, hubFrames := stopHub()
	wanHits, wanFrames := stopWAN()
	e2Hits, _ := stopE2()
	after := metric(l.metrics("a"), `bridgehead_transit_datagrams_total{direction="forwarded"}`)
	l.t.Logf("marker (20 datagrams): %d frames with it at node E2 (the datagrams, and ICMP errors quoting them); hub namespace %d frames, %d with the marker; WAN %d frames, %d with it; hub forwarded %v relay messages meanwhile",
		e2Hits, hubFrames, hubHits, wanFrames, wanHits, after-before)
	if e2Hits == 0 {
		l.t.Error("the marker never reached pod E2: the check proves nothing")
	}
	if hubHits != 0 || wanHits != 0 {
		l.t.Errorf("the plaintext marker was seen on the hub (%d frames) or the WAN (%d frames)", hubHits, wanHits)
	}
	if after-before < 20 {
		l.t.Errorf("the hub forwarded %v relay messages while the marker went; it did not go through the hub", after-before)
	}
}
