//go:build linux

package tun

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/packet"
)

const testIfName = "bhtest0"

var (
	tunAddr  = [4]byte{10, 99, 0, 1} // the TUN's own address
	peerAddr = [4]byte{10, 99, 0, 2} // routed into the TUN, nobody answers
)

// openTestTUN creates testIfName in a fresh namespace, addresses it as
// 10.99.0.1/24 and brings it up.
func openTestTUN(t *testing.T) *Water {
	t.Helper()
	enterNetns(t)
	w, err := OpenWater(WaterConfig{Name: testIfName, MTU: 1420})
	if err != nil {
		t.Fatalf("OpenWater: %v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	ip(t, "link", "set", "dev", testIfName, "mtu", "1420")
	ip(t, "addr", "add", "10.99.0.1/24", "dev", testIfName)
	ip(t, "link", "set", "dev", testIfName, "up")
	return w
}

// readMatching reads packets until match accepts one or the deadline passes,
// skipping unrelated traffic (for example IPv6 router solicitations). It
// allocates nothing.
func readMatching(w *Water, bufs [][]byte, sizes []int, match func([]byte) bool) ([]byte, error) {
	for {
		n, err := w.Read(bufs, sizes, testOffset)
		if err != nil {
			return nil, err
		}
		if n != 1 {
			return nil, errors.New("Read returned a batch from a BatchSize 1 device")
		}
		pkt := bufs[0][testOffset : testOffset+sizes[0]]
		if match(pkt) {
			return pkt, nil
		}
	}
}

func TestWaterReceivesRoutedUDP(t *testing.T) {
	w := openTestTUN(t)
	if w.Name() != testIfName || w.MTU() != 1420 || w.BatchSize() != 1 {
		t.Fatalf("Name/MTU/BatchSize = %q/%d/%d", w.Name(), w.MTU(), w.BatchSize())
	}
	if err := w.file.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IP(peerAddr[:]), Port: 9999})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := []byte("through the tunnel")
	if _, err := conn.Write(payload); err != nil {
		t.Fatal(err)
	}

	bufs := [][]byte{make([]byte, testOffset+1500)}
	sizes := make([]int, 1)
	pkt, err := readMatching(w, bufs, sizes, func(p []byte) bool {
		return len(p) >= 28 && p[0]>>4 == 4 && p[9] == 17 &&
			[4]byte(p[16:20]) == peerAddr && binary.BigEndian.Uint16(p[22:24]) == 9999
	})
	if err != nil {
		t.Fatalf("reading the UDP packet: %v", err)
	}
	if [4]byte(pkt[12:16]) != tunAddr {
		t.Errorf("source %v, want %v", net.IP(pkt[12:16]), net.IP(tunAddr[:]))
	}
	ihl := int(pkt[0]&0xf) * 4
	if got := string(pkt[ihl+8:]); got != string(payload) {
		t.Errorf("payload %q, want %q", got, payload)
	}
}

func TestWaterEchoRoundTrip(t *testing.T) {
	w := openTestTUN(t)
	if err := w.file.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	req := echoRequest(peerAddr, tunAddr, 0x4242, 7, []byte("ping-payload"))
	out := make([]byte, testOffset+len(req))
	copy(out[testOffset:], req)
	wbufs := [][]byte{out}
	rbufs := [][]byte{make([]byte, testOffset+1500)}
	sizes := make([]int, 1)
	isReply := func(p []byte) bool {
		return len(p) >= 28 && p[0]>>4 == 4 && p[9] == 1 && p[20] == 0 &&
			[4]byte(p[12:16]) == tunAddr && [4]byte(p[16:20]) == peerAddr
	}

	if n, err := w.Write(wbufs, testOffset); n != 1 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	reply, err := readMatching(w, rbufs, sizes, isReply)
	if err != nil {
		t.Fatalf("reading the echo reply: %v", err)
	}
	if len(reply) != len(req) {
		t.Fatalf("reply is %d bytes, want %d", len(reply), len(req))
	}
	if id, seq := binary.BigEndian.Uint16(reply[24:26]), binary.BigEndian.Uint16(reply[26:28]); id != 0x4242 || seq != 7 {
		t.Errorf("reply id/seq = %#x/%d", id, seq)
	}
	if string(reply[28:]) != "ping-payload" {
		t.Errorf("reply payload %q", reply[28:])
	}

	// Steady state: a write and a read allocate nothing.
	allocs := testing.AllocsPerRun(50, func() {
		if n, err := w.Write(wbufs, testOffset); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if _, err := readMatching(w, rbufs, sizes, isReply); err != nil {
			t.Fatalf("Read: %v", err)
		}
	})
	if allocs != 0 {
		t.Errorf("Write+Read allocates %v times per round", allocs)
	}
}

func TestWaterCloseUnblocksRead(t *testing.T) {
	enterNetns(t)
	w, err := OpenWater(WaterConfig{Name: testIfName, MTU: 1400})
	if err != nil {
		t.Fatalf("OpenWater: %v", err)
	}
	checkCloseUnblocksRead(t, w)
}

// checkCloseUnblocksRead checks the Close contract of device.go on a
// device whose link is down (so Read blocks): Close unblocks a pending
// Read with ErrClosed, a second Close is harmless, and Read and Write
// after Close return ErrClosed.
func checkCloseUnblocksRead(t *testing.T, dev Device) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		bufs, sizes := newBufs(dev.BatchSize(), 2000)
		_, err := dev.Read(bufs, sizes, testOffset)
		errc <- err
	}()
	select {
	case err := <-errc:
		t.Fatalf("Read returned before Close: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := dev.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if err != ErrClosed {
			t.Errorf("blocked Read returned %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
	if err := dev.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := dev.Read([][]byte{make([]byte, 100)}, make([]int, 1), testOffset); err != ErrClosed {
		t.Errorf("Read after Close: %v, want ErrClosed", err)
	}
	if _, err := dev.Write([][]byte{make([]byte, 60)}, testOffset); err != ErrClosed {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
}

func TestWaterMultiQueue(t *testing.T) {
	enterNetns(t)
	single, err := OpenWater(WaterConfig{Name: "bhsingle0"})
	if err != nil {
		t.Fatalf("OpenWater: %v", err)
	}
	defer single.Close()
	if _, err := single.OpenQueue(); err != errNotMultiQueue {
		t.Errorf("OpenQueue on a single-queue device: %v", err)
	}

	first, err := OpenWater(WaterConfig{Name: testIfName, MTU: 1420, MultiQueue: true})
	if err != nil {
		t.Fatalf("OpenWater(MultiQueue): %v", err)
	}
	defer first.Close()
	second, err := first.OpenQueue()
	if err != nil {
		t.Fatalf("OpenQueue: %v", err)
	}
	defer second.Close()
	if second.Name() != first.Name() || second.MTU() != 1420 {
		t.Errorf("queue reports %q/%d", second.Name(), second.MTU())
	}
	ip(t, "addr", "add", "10.99.0.1/24", "dev", testIfName)
	ip(t, "link", "set", "dev", testIfName, "up")
	req := echoRequest(peerAddr, tunAddr, 1, 1, nil)
	for _, q := range []*Water{first, second} {
		if n, err := q.Write([][]byte{req}, 0); n != 1 || err != nil {
			t.Errorf("Write on a queue = %d, %v", n, err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.OpenQueue(); err != ErrClosed {
		t.Errorf("OpenQueue after Close: %v", err)
	}
}

func TestWaterBadArguments(t *testing.T) {
	if _, err := OpenWater(WaterConfig{MTU: -1}); err == nil {
		t.Error("negative MTU accepted")
	}
	w := &Water{} // never opened: argument checks come first
	if _, err := w.Read(nil, nil, 0); err != errNoBuffer {
		t.Errorf("Read(nil): %v", err)
	}
	if _, err := w.Read([][]byte{make([]byte, 4)}, make([]int, 1), 4); err != errBadOffset {
		t.Errorf("Read past the buffer: %v", err)
	}
	if n, err := w.Write([][]byte{make([]byte, 4)}, 5); n != 0 || err != errBadOffset {
		t.Errorf("Write past the buffer: %d, %v", n, err)
	}
}

// echoRequest builds an IPv4 ICMP echo request.
func echoRequest(src, dst [4]byte, id, seq uint16, payload []byte) []byte {
	p := make([]byte, 28+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[8] = 64 // TTL
	p[9] = 1  // ICMP
	copy(p[12:16], src[:])
	copy(p[16:20], dst[:])
	binary.BigEndian.PutUint16(p[10:], packet.Checksum(p[:20], 0))
	p[20] = 8 // echo request
	binary.BigEndian.PutUint16(p[24:], id)
	binary.BigEndian.PutUint16(p[26:], seq)
	copy(p[28:], payload)
	binary.BigEndian.PutUint16(p[22:], packet.Checksum(p[20:], 0))
	return p
}
