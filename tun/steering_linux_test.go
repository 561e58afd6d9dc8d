//go:build linux

package tun

import (
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/steer"
)

// TestSteeringExpressQueue attaches package steer's program to a
// multi-queue interface of two bulk queues and an express one, routes UDP
// flows into it from sockets and reads every queue: a small flow arrives
// on the express queue whatever else is sent; a big flow starts there and
// moves to one bulk queue once it has sent its burst, and stays there.
// After SetSteering(-1) the kernel chooses by flow hash again. For both
// backends.
func TestSteeringExpressQueue(t *testing.T) {
	t.Run("offload", func(t *testing.T) {
		requireNetns(t)
		devs, err := OpenOffloadQueues(OffloadConfig{Name: "bl-st0", MTU: 1420}, 3, nil)
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
		checkSteering(t, "bl-st0", devs)
	})
	t.Run("water", func(t *testing.T) {
		requireNetns(t)
		devs, err := OpenWaterQueues(WaterConfig{Name: "bl-st1", MTU: 1420}, 3)
		if err != nil {
			t.Fatal(err)
		}
		checkSteering(t, "bl-st1", devs)
	})
}

// steerPacket is a UDP datagram of a test flow read from a queue: the
// flow is its source port, seq the first 4 bytes of its payload.
type steerPacket struct {
	queue, port int
	seq         uint32
}

// checkSteering is TestSteeringExpressQueue on ifname, whose queues are
// devs (the last the express queue). It closes devs and checks that the
// interface is gone afterwards.
func checkSteering(t *testing.T, ifname string, devs []Device) {
	t.Helper()
	n := len(devs) - 1
	var mu sync.Mutex
	var got []steerPacket
	var wg sync.WaitGroup
	for q, d := range devs {
		wg.Go(func() {
			bs := d.BatchSize()
			bufs, sizes := make([][]byte, bs), make([]int, bs)
			for i := range bufs {
				bufs[i] = make([]byte, testOffset+1500)
			}
			for {
				k, err := d.Read(bufs, sizes, testOffset)
				if err != nil {
					return
				}
				mu.Lock()
				for i := range k {
					pkt := bufs[i][testOffset : testOffset+sizes[i]]
					if len(pkt) >= 32 && pkt[0] == 0x45 && pkt[9] == 17 {
						got = append(got, steerPacket{q, int(binary.BigEndian.Uint16(pkt[20:])), binary.BigEndian.Uint32(pkt[28:])})
					}
				}
				mu.Unlock()
			}
		})
	}
	defer func() {
		for _, d := range devs {
			d.Close()
		}
		wg.Wait()
		// The interface goes away with its last queue; delete it by name
		// if it did not.
		if _, err := net.InterfaceByName(ifname); err == nil {
			t.Errorf("interface %s still there after its queues closed", ifname)
			_ = exec.Command("ip", "link", "del", ifname).Run()
		}
	}()

	// Quiet is long so that the big flow, however slowly the test runs,
	// never becomes sparse again; Seed fixes the buckets, so the small
	// flows never share one with the big flow (TestSteerBulkFlow shows
	// what two flows in one bucket do).
	p, err := steer.Load(steer.Config{Queues: n, Quiet: time.Hour, Seed: 1})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	defer p.Close()
	if err := SetSteering(devs[0], p.FD()); err != nil {
		t.Fatal(err)
	}
	ip(t, "addr", "add", "10.79.0.1/24", "dev", ifname)
	ip(t, "link", "set", ifname, "up")
	ip(t, "route", "add", "10.80.0.0/24", "dev", ifname)

	dial := func(port int, to string) *net.UDPConn {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 79, 0, 1), Port: port}, &net.UDPAddr{IP: net.ParseIP(to), Port: 9000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	send := func(c *net.UDPConn, seq uint32, size int) {
		b := make([]byte, size)
		binary.BigEndian.PutUint32(b, seq)
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	// wait waits for want packets from the ports and returns, by port,
	// the queue of each seq.
	wait := func(want int, ports ...int) map[int]map[uint32]int {
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			out := map[int]map[uint32]int{}
			k := 0
			for _, pk := range got {
				for _, port := range ports {
					if pk.port != port {
						continue
					}
					if out[port] == nil {
						out[port] = map[uint32]int{}
					}
					if q, dup := out[port][pk.seq]; dup {
						t.Errorf("port %d seq %d read twice, on queues %d and %d", port, pk.seq, q, pk.queue)
					}
					out[port][pk.seq] = pk.queue
					k++
				}
			}
			mu.Unlock()
			if k >= want || time.Now().After(deadline) {
				if k != want {
					t.Fatalf("read %d packets of ports %v, want %d", k, ports, want)
				}
				return out
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// A small flow, then a big flow (64 datagrams of 1228 bytes, 78 KB
	// against a burst of 16 KiB) with the small flow's packets between
	// its own.
	const smallPort, bigPort, bigCount, smallCount = 7001, 7002, 64, 20
	small, big := dial(smallPort, "10.79.0.2"), dial(bigPort, "10.80.0.5")
	s := uint32(0)
	for ; s < 4; s++ {
		send(small, s, 100)
	}
	for b := range uint32(bigCount) {
		send(big, b, 1200)
		if b%4 == 3 {
			send(small, s, 100)
			s++
		}
	}
	seen := wait(smallCount+bigCount, smallPort, bigPort)
	for seq, q := range seen[smallPort] {
		if q != n {
			t.Errorf("small flow seq %d on queue %d, want the express queue %d", seq, q, n)
		}
	}
	first, bulkQ := uint32(bigCount), -1 // the big flow's first bulk packet and its queue
	for seq, q := range seen[bigPort] {
		if q != n && seq < first {
			first, bulkQ = seq, q
		}
	}
	perQueue := make([]int, len(devs))
	for seq := range uint32(bigCount) {
		q := seen[bigPort][seq]
		perQueue[q]++
		switch {
		case seq < first && q != n:
			t.Errorf("big flow seq %d on queue %d before its first bulk packet %d", seq, q, first)
		case seq >= first && q != bulkQ:
			t.Errorf("big flow seq %d on queue %d after its first bulk packet %d (queue %d)", seq, q, first, bulkQ)
		}
	}
	t.Logf("big flow by queue: %v, first bulk packet %d", perQueue, first)
	if bulkQ < 0 || bulkQ >= n {
		t.Fatalf("big flow never on a bulk queue: %v", perQueue)
	}
	// 16 KiB of 1228-byte packets, and what refills while they go.
	if first < 12 || first > 20 {
		t.Errorf("big flow bulk from seq %d, want about 13", first)
	}

	// Detached, through another queue: the kernel spreads 32 small flows
	// over the queues again, so not all on the express queue.
	if err := SetSteering(devs[1], -1); err != nil {
		t.Fatal(err)
	}
	var ports []int
	for i := range 32 {
		port := 7100 + i
		send(dial(port, "10.79.0.2"), 0, 100)
		ports = append(ports, port)
	}
	onExpress := 0
	for _, qs := range wait(len(ports), ports...) {
		if qs[0] == n {
			onExpress++
		}
	}
	if onExpress == len(ports) {
		t.Errorf("after detaching, all %d small flows still on the express queue", onExpress)
	}
	t.Logf("after detaching, %d of %d small flows on the express queue", onExpress, len(ports))
}

// TestSetSteeringErrors: what SetSteering refuses, with "tun: steering: ".
func TestSetSteeringErrors(t *testing.T) {
	requireNetns(t)
	devs, err := OpenOffloadQueues(OffloadConfig{Name: "bl-st2", MTU: 1420}, 2, nil)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	notBPF, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer notBPF.Close()
	for _, tc := range []struct {
		name string
		d    Device
		fd   int
		ok   bool
	}{
		{"detach with nothing attached", devs[0], -1, true},
		{"not a TUN queue", NewChannel("ch", 1420), -1, false},
		{"not a BPF program", devs[1], int(notBPF.Fd()), false},
		{"not open", devs[0], 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := SetSteering(tc.d, tc.fd)
			switch {
			case tc.ok && err != nil:
				t.Fatal(err)
			case !tc.ok && err == nil:
				t.Fatal("no error")
			case err != nil && !strings.HasPrefix(err.Error(), "tun: steering: "):
				t.Fatalf("error %q without the prefix", err)
			}
			t.Log(err)
		})
	}
}
