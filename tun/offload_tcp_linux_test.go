//go:build linux

package tun

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bridgehead/bridgehead/packet"
)

// TestOffloadWriteTCP hands the kernel's TCP stack a connection through
// the TUN: a handshake written and read as packets, then 40 data segments
// in one Write. The kernel accepts the segments merged into one
// checksum-partial super-packet (the interface counts one received packet
// for them) and the listening socket reads every byte in order.
func TestOffloadWriteTCP(t *testing.T) {
	d := openTestOffload(t, nil)
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IP(tunAddr[:])})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	peer, local := netip.AddrFrom4(peerAddr), netip.AddrFrom4(tunAddr)
	base := seg{src: peer, dst: local, sport: 40000, dport: port, bare: true, window: 65535}
	write := func(ss ...seg) {
		t.Helper()
		bufs := make([][]byte, len(ss))
		for i, s := range ss {
			bufs[i] = tcpSeg(s, testOffset)
		}
		if n, err := d.Write(bufs, testOffset); n != len(bufs) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}

	const isn = 1000
	syn := base
	syn.seq, syn.flags = isn, 0x02
	write(syn)
	rbufs, sizes := newBufs(d.BatchSize(), testOffset+1500)
	synAck, _, err := readOffload(d, rbufs, sizes, 1, func(p []byte) bool {
		return len(p) >= 40 && p[0] == 0x45 && p[9] == 6 && [4]byte(p[16:20]) == peerAddr &&
			binary.BigEndian.Uint16(p[20:]) == port && p[33]&0x12 == 0x12
	})
	if err != nil {
		t.Fatalf("no SYN-ACK: %v", err)
	}
	ack := binary.BigEndian.Uint32(synAck[0][24:]) + 1
	pure := base
	pure.seq, pure.ack, pure.flags = isn+1, ack, tcpFlagACK
	write(pure)
	ln.SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	const n, size = 40, 1000
	data := make([]seg, n)
	for i := range data {
		data[i] = base
		data[i].seq, data[i].ack, data[i].flags, data[i].payload = isn+1+uint32(i*size), ack, tcpFlagACK, size
	}
	data[n-1].flags |= tcpFlagPSH
	before := rxPackets(t)
	write(data...)
	got := make([]byte, n*size)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("reading the data: %v", err)
	}
	for j, b := range got {
		if b != byte(isn+1+j) {
			t.Fatalf("byte %d is %d, want %d", j, b, byte(isn+1+j))
		}
	}
	if rx := rxPackets(t) - before; rx != 1 {
		t.Errorf("the interface received %d packets for %d segments, want 1 super-packet", rx, n)
	}
}

// rxPackets returns the received-packet count of the test interface.
func rxPackets(t *testing.T) uint64 {
	t.Helper()
	out, err := exec.Command("ip", "-s", "-j", "link", "show", "dev", testIfName).Output()
	if err != nil {
		t.Fatalf("ip -s link: %v", err)
	}
	var links []struct {
		Stats64 struct {
			RX struct {
				Packets uint64 `json:"packets"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -s -j link: %v: %s", err, out)
	}
	return links[0].Stats64.RX.Packets
}

// TestOffloadWriteTCPForwarded checks the partial checksum the way a real
// path completes it: segments written to the TUN for an address behind a
// veth without checksum offload are forwarded, segmented again in software
// (GSO), and summed by the kernel from the pseudo-header sum that Write
// left; every segment captured on the far end must verify, and carry the
// payload that went in.
func TestOffloadWriteTCPForwarded(t *testing.T) {
	d := openTestOffload(t, nil)
	ip(t, "link", "add", "bhfw0", "type", "veth", "peer", "name", "bhfw1")
	ip(t, "link", "set", "bhfw0", "up")
	ip(t, "link", "set", "bhfw1", "up")
	ip(t, "addr", "add", "10.98.0.1/24", "dev", "bhfw0")
	if out, err := exec.Command("ethtool", "-K", "bhfw0", "tx", "off").CombinedOutput(); err != nil {
		t.Fatalf("ethtool -K bhfw0 tx off: %v: %s", err, out)
	}
	far, err := net.InterfaceByName("bhfw1")
	if err != nil {
		t.Fatal(err)
	}
	ip(t, "neigh", "add", "10.98.0.2", "lladdr", far.HardwareAddr.String(), "dev", "bhfw0")
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	capture := packetSocket(t, far.Index)

	src, dst := netip.AddrFrom4(peerAddr), netip.MustParseAddr("10.98.0.2")
	const n, size = 20, 1000
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = tcpSeg(seg{src: src, dst: dst, sport: 5000, dport: 6000, seq: uint32(1 + i*size),
			ack: 1, flags: tcpFlagACK, payload: size}, testOffset)
	}
	if w, err := d.Write(bufs, testOffset); w != n || err != nil {
		t.Fatalf("Write = %d, %v", w, err)
	}
	buf := make([]byte, 65536)
	next := uint32(1)
	for next < 1+n*size {
		m, err := unix.Read(capture, buf)
		if err != nil {
			t.Fatalf("capture after %d bytes: %v", next-1, err)
		}
		p := buf[:m]
		ipLen, tcpLen, _, ok := tcpHeaders(p)
		if !ok || [4]byte(p[16:20]) != dst.As4() {
			continue
		}
		l4 := p[ipLen:]
		if c := packet.Checksum(l4, packet.PseudoHeaderSum(src, dst, 6, len(l4))); c != 0 {
			t.Fatalf("segment at %d: TCP checksum does not verify", binary.BigEndian.Uint32(l4[4:]))
		}
		if seq := binary.BigEndian.Uint32(l4[4:]); seq != next {
			t.Fatalf("segment at %d, want %d", seq, next)
		}
		for j, b := range l4[tcpLen:] {
			if b != byte(next+uint32(j)) {
				t.Fatalf("payload byte %d of the segment at %d is wrong", j, next)
			}
		}
		next += uint32(len(l4) - tcpLen)
	}
}

// packetSocket opens an AF_PACKET socket that receives the IPv4 packets
// arriving on interface index, with a 10 s receive timeout.
func packetSocket(t *testing.T, index int) int {
	t.Helper()
	const proto = unix.ETH_P_IP<<8&0xff00 | unix.ETH_P_IP>>8 // htons
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: index}); err != nil {
		t.Fatal(err)
	}
	tv := unix.Timeval{Sec: 10}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return fd
}
