//go:build linux

package tun

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bridgehead/bridgehead/internal/syncbuf"
	"github.com/bridgehead/bridgehead/packet"
)

// openTestOffload creates testIfName as an offload TUN in a fresh
// namespace, addresses it as 10.99.0.1/24 and brings it up. Log output
// goes to logBuf when it is not nil.
func openTestOffload(t *testing.T, logBuf *syncbuf.Buffer) *Offload {
	t.Helper()
	enterNetns(t)
	var log *slog.Logger
	if logBuf != nil {
		log = slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	dev, err := OpenOffload(OffloadConfig{Name: testIfName, MTU: 1420}, log)
	if err != nil {
		t.Fatalf("OpenOffload: %v", err)
	}
	d := dev.(*Offload)
	t.Cleanup(func() { _ = d.Close() })
	ip(t, "addr", "add", "10.99.0.1/24", "dev", testIfName)
	ip(t, "link", "set", "dev", testIfName, "up")
	if err := d.dev.File().SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return d
}

// newBufs returns n buffers of size bytes and a sizes slice.
func newBufs(n, size int) ([][]byte, []int) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs, make([]int, n)
}

// readOffload reads until it has collected want packets accepted by match,
// skipping others. It returns the packets (copied) and the size of every
// Read batch that contained a match.
func readOffload(d *Offload, bufs [][]byte, sizes []int, want int, match func([]byte) bool) ([][]byte, []int, error) {
	var got [][]byte
	var batches []int
	for len(got) < want {
		n, err := d.Read(bufs, sizes, testOffset)
		if err != nil {
			return got, batches, err
		}
		matched := 0
		for i := range n {
			pkt := bufs[i][testOffset : testOffset+sizes[i]]
			if match(pkt) {
				got = append(got, bytes.Clone(pkt))
				matched++
			}
		}
		if matched > 0 {
			batches = append(batches, n)
		}
	}
	return got, batches, nil
}

// isUDPTo matches IPv4 UDP packets to dst:port.
func isUDPTo(dst [4]byte, port uint16) func([]byte) bool {
	return func(p []byte) bool {
		return len(p) >= 28 && p[0] == 0x45 && p[9] == unix.IPPROTO_UDP &&
			[4]byte(p[16:20]) == dst && binary.BigEndian.Uint16(p[22:24]) == port
	}
}

// sendGSO sends payload to dst as one UDP_SEGMENT message with segment
// size seg, so the kernel hands the TUN one super-packet.
func sendGSO(t *testing.T, conn *net.UDPConn, payload []byte, seg int) {
	t.Helper()
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&oob[unix.CmsgLen(0)])) = uint16(seg)
	if _, _, err := conn.WriteMsgUDP(payload, oob, nil); err != nil {
		t.Fatalf("UDP_SEGMENT send: %v", err)
	}
}

func TestOffloadReadsUDP(t *testing.T) {
	var logBuf syncbuf.Buffer
	d := openTestOffload(t, &logBuf)
	if d.Name() != testIfName || d.MTU() != 1420 {
		t.Fatalf("Name/MTU = %q/%d", d.Name(), d.MTU())
	}
	if d.BatchSize() <= 1 {
		t.Fatalf("BatchSize %d: offloads not active; log:\n%s", d.BatchSize(), logBuf.String())
	}
	if !strings.Contains(logBuf.String(), "tso=true") {
		t.Errorf("open did not log the offloads:\n%s", logBuf.String())
	}
	uso := strings.Contains(logBuf.String(), "uso=true")
	t.Logf("BatchSize %d, USO %v", d.BatchSize(), uso)
	bufs, sizes := newBufs(d.BatchSize(), testOffset+1500)

	// One plain datagram.
	conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IP(peerAddr[:]), Port: 9999})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("through the tunnel")); err != nil {
		t.Fatal(err)
	}
	pkts, _, err := readOffload(d, bufs, sizes, 1, isUDPTo(peerAddr, 9999))
	if err != nil {
		t.Fatalf("reading the datagram: %v", err)
	}
	if got := string(pkts[0][28:]); got != "through the tunnel" || [4]byte(pkts[0][12:16]) != tunAddr {
		t.Errorf("payload %q from %v", got, net.IP(pkts[0][12:16]))
	}

	// A UDP GSO send of 10 full segments and a short one: with USO the
	// kernel hands over one super-packet and Read splits it into 11
	// packets in one call.
	const seg, nseg = 1000, 11
	payload := make([]byte, seg*(nseg-1)+500)
	for i := range payload {
		payload[i] = byte(i / seg * 7)
	}
	sendGSO(t, conn, payload, seg)
	pkts, batches, err := readOffload(d, bufs, sizes, nseg, isUDPTo(peerAddr, 9999))
	if err != nil {
		t.Fatalf("reading the segments: %v", err)
	}
	t.Logf("segments arrived in Read batches of %v", batches)
	if uso && (len(batches) != 1 || batches[0] != nseg) {
		t.Errorf("USO active but the segments came in batches %v, want one of %d", batches, nseg)
	}
	for i, p := range pkts {
		want := payload[i*seg : min((i+1)*seg, len(payload))]
		if len(p) != 28+len(want) || int(binary.BigEndian.Uint16(p[2:])) != len(p) {
			t.Fatalf("segment %d: %d bytes (IP total length %d), want %d",
				i, len(p), binary.BigEndian.Uint16(p[2:]), 28+len(want))
		}
		if packet.Checksum(p[:20], 0) != 0 {
			t.Errorf("segment %d: bad IP header checksum", i)
		}
		if int(binary.BigEndian.Uint16(p[24:])) != 8+len(want) || !bytes.Equal(p[28:], want) {
			t.Errorf("segment %d: wrong UDP length or payload", i)
		}
		if udpChecksum(p) != 0 {
			t.Errorf("segment %d: bad UDP checksum", i)
		}
	}
	if d.Dropped() != 0 {
		t.Errorf("Dropped = %d", d.Dropped())
	}
}

func TestOffloadEchoRoundTrip(t *testing.T) {
	d := openTestOffload(t, nil)
	req := echoRequest(peerAddr, tunAddr, 0x4242, 7, []byte("ping-payload"))
	out := make([]byte, testOffset+len(req))
	copy(out[testOffset:], req)
	wbufs := [][]byte{out}
	rbufs, sizes := newBufs(d.BatchSize(), testOffset+1500)
	isReply := func(p []byte) bool {
		return len(p) >= 28 && p[0]>>4 == 4 && p[9] == 1 && p[20] == 0 &&
			[4]byte(p[12:16]) == tunAddr && [4]byte(p[16:20]) == peerAddr
	}
	readReply := func() ([]byte, error) {
		for {
			n, err := d.Read(rbufs, sizes, testOffset)
			if err != nil {
				return nil, err
			}
			for i := range n {
				if p := rbufs[i][testOffset : testOffset+sizes[i]]; isReply(p) {
					return p, nil
				}
			}
		}
	}

	if n, err := d.Write(wbufs, testOffset); n != 1 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	reply, err := readReply()
	if err != nil {
		t.Fatalf("reading the echo reply: %v", err)
	}
	if len(reply) != len(req) || string(reply[28:]) != "ping-payload" {
		t.Fatalf("reply %x", reply)
	}
	if id, seq := binary.BigEndian.Uint16(reply[24:26]), binary.BigEndian.Uint16(reply[26:28]); id != 0x4242 || seq != 7 {
		t.Errorf("reply id/seq = %#x/%d", id, seq)
	}

	// Steady state: a write and a read allocate nothing.
	allocs := testing.AllocsPerRun(50, func() {
		copy(out[testOffset:], req) // Write may rewrite headers
		if n, err := d.Write(wbufs, testOffset); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if _, err := readReply(); err != nil {
			t.Fatalf("Read: %v", err)
		}
	})
	if allocs != 0 {
		t.Errorf("Write+Read allocates %v times per round", allocs)
	}
}

// TestOffloadWriteCoalesces writes runs of UDP datagrams of one flow to a
// socket on the TUN's own address. With buffers of OffloadWriteBufferSize
// capacity the library merges the run into super-packets (GRO) of at most
// 64 KiB, which a UDP_GRO socket receives as few messages; with tight
// buffers it cannot, and the datagrams arrive one by one. Buffers with even
// more capacity must not make it build packets over the IP limit. Every
// datagram arrives intact and in order.
func TestOffloadWriteCoalesces(t *testing.T) {
	var logBuf syncbuf.Buffer
	d := openTestOffload(t, &logBuf)
	if !strings.Contains(logBuf.String(), "uso=true") {
		t.Skipf("no UDP segmentation offload:\n%s", logBuf.String())
	}
	// 60 datagrams of 1200 bytes are more than one 64 KiB super-packet.
	const port, nPkts, payloadLen = 7777, 60, 1200
	sock, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP(tunAddr[:]), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	if err := sock.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	rc, err := sock.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
	}); err != nil || serr != nil {
		t.Fatalf("UDP_GRO: %v %v", err, serr)
	}

	for _, tc := range []struct {
		name      string
		capacity  int
		coalesces bool
	}{
		{"roomy", testOffset + OffloadWriteBufferSize, true},
		{"tight", testOffset + 28 + payloadLen, false},
		{"oversized", 2 * (testOffset + OffloadWriteBufferSize), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bufs := make([][]byte, nPkts)
			for i := range bufs {
				pkt := udpPacket(peerAddr, tunAddr, 5555, port, uint16(i), bytes.Repeat([]byte{byte(i)}, payloadLen))
				b := make([]byte, testOffset+len(pkt), tc.capacity)
				copy(b[testOffset:], pkt)
				bufs[i] = b
			}
			headers := append([][]byte(nil), bufs...)
			if n, err := d.Write(bufs, testOffset); n != nPkts || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			for i := range bufs {
				if &bufs[i][0] != &headers[i][0] || len(bufs[i]) != len(headers[i]) {
					t.Fatalf("Write changed the caller's slice header %d", i)
				}
			}
			msgs, next := 0, 0
			buf, oob := make([]byte, 1<<16), make([]byte, 64)
			for next < nPkts {
				n, oobn, _, _, err := sock.ReadMsgUDP(buf, oob)
				if err != nil {
					t.Fatalf("after %d datagrams: %v", next, err)
				}
				msgs++
				seg := groSize(oob[:oobn])
				if seg == 0 {
					seg = n
				}
				for off := 0; off < n; off += seg {
					p := buf[off:min(off+seg, n)]
					if len(p) != payloadLen || !bytes.Equal(p, bytes.Repeat([]byte{byte(next)}, payloadLen)) {
						t.Fatalf("datagram %d: %d bytes starting %x", next, len(p), p[:min(4, len(p))])
					}
					next++
				}
			}
			t.Logf("%d datagrams arrived in %d messages", nPkts, msgs)
			if tc.coalesces && (msgs < 2 || msgs >= nPkts/2) {
				t.Errorf("%d messages for %d datagrams: GRO did not coalesce", msgs, nPkts)
			}
			if !tc.coalesces && msgs != nPkts {
				t.Errorf("%d messages for %d datagrams with tight buffers", msgs, nPkts)
			}
		})
	}
}

func TestOffloadCloseUnblocksRead(t *testing.T) {
	enterNetns(t)
	dev, err := OpenOffload(OffloadConfig{Name: testIfName, MTU: 1400}, nil)
	if err != nil {
		t.Fatalf("OpenOffload: %v", err)
	}
	checkCloseUnblocksRead(t, dev)
	// The interface is gone with its last descriptor.
	if _, err := net.InterfaceByName(testIfName); err == nil {
		t.Error("interface still exists after Close")
	}
}

func TestOffloadBadArguments(t *testing.T) {
	for _, cfg := range []OffloadConfig{
		{Name: "bh0", MTU: 0},
		{Name: "bh0", MTU: 67},
		{Name: "bh0", MTU: 65536},
		{Name: strings.Repeat("x", 16), MTU: 1420},
	} {
		if d, err := OpenOffload(cfg, nil); err == nil {
			_ = d.Close()
			t.Errorf("OpenOffload(%+v) succeeded", cfg)
		}
	}
	d := &Offload{} // never opened: argument checks come first
	if _, err := d.Read(nil, nil, 0); err != errNoBuffer {
		t.Errorf("Read(nil): %v", err)
	}
	if _, err := d.Read([][]byte{make([]byte, 4)}, make([]int, 1), 4); err != errBadOffset {
		t.Errorf("Read past the buffer: %v", err)
	}
	if n, err := d.Write([][]byte{make([]byte, 40)}, HeadroomNeeded-1); n != 0 || err != errBadOffset {
		t.Errorf("Write without headroom: %d, %v", n, err)
	}
	if n, err := d.Write([][]byte{make([]byte, 40)}, 40); n != 0 || err != errBadOffset {
		t.Errorf("Write of an empty packet: %d, %v", n, err)
	}
}

// TestOffloadOpenFailureIsClear checks the error when the kernel refuses
// the device (here: the name of the loopback link), and that nothing is
// logged: the caller decides whether to fall back and says so once.
func TestOffloadOpenFailureIsClear(t *testing.T) {
	enterNetns(t)
	var logBuf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	d, err := OpenOffload(OffloadConfig{Name: "lo", MTU: 1420}, log)
	if err == nil {
		_ = d.Close()
		t.Fatal("OpenOffload over the loopback link succeeded")
	}
	if !strings.Contains(err.Error(), `"lo"`) || logBuf.String() != "" {
		t.Errorf("error %q, log %q", err, logBuf.String())
	}
}

// udpPacket builds an IPv4 UDP packet with valid checksums.
func udpPacket(src, dst [4]byte, sport, dport, id uint16, payload []byte) []byte {
	p := make([]byte, 28+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[4:], id)
	p[6] = 0x40 // DF
	p[8] = 64
	p[9] = unix.IPPROTO_UDP
	copy(p[12:16], src[:])
	copy(p[16:20], dst[:])
	binary.BigEndian.PutUint16(p[10:], packet.Checksum(p[:20], 0))
	binary.BigEndian.PutUint16(p[20:], sport)
	binary.BigEndian.PutUint16(p[22:], dport)
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
	copy(p[28:], payload)
	binary.BigEndian.PutUint16(p[26:], udpChecksum(p))
	return p
}

// udpChecksum is the UDP checksum over the pseudo-header and p[20:] of an
// IPv4 packet without options; 0 means a packet with a valid checksum
// verifies (or, for a packet with its checksum field zeroed, the value to
// store).
func udpChecksum(p []byte) uint16 {
	src, _ := netip.AddrFromSlice(p[12:16])
	dst, _ := netip.AddrFromSlice(p[16:20])
	return packet.Checksum(p[20:], packet.PseudoHeaderSum(src, dst, unix.IPPROTO_UDP, len(p)-20))
}

// groSize returns the segment size of a UDP_GRO control message leading
// oob (the only one the tests enable), or 0 if there is none. It allocates
// nothing.
func groSize(oob []byte) int {
	if len(oob) < unix.CmsgLen(4) {
		return 0
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	if h.Level != unix.SOL_UDP || h.Type != unix.UDP_GRO || int(h.Len) < unix.CmsgLen(4) {
		return 0
	}
	return int(*(*int32)(unsafe.Pointer(&oob[unix.CmsgLen(0)])))
}
