//go:build linux

package tun

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkTUNWriteUDP writes batches of 64 UDP packets of one flow (1420
// bytes, as the router delivers decrypted traffic) into the TUN, addressed
// to a socket on the TUN's own address, and drains the socket. It compares
// the water backend (one write per packet) with the offload backend given
// roomy buffers (GRO merges the batch into two super-packets) and tight
// ones (no room to merge: one write per packet plus GRO bookkeeping).
func BenchmarkTUNWriteUDP(b *testing.B) {
	for _, c := range []struct {
		name    string
		offload bool
		cap     int
	}{
		{"water", false, testOffset + 1500},
		{"offload-tight", true, testOffset + 1500},
		{"offload-roomy", true, testOffset + OffloadWriteBufferSize},
	} {
		b.Run(c.name, func(b *testing.B) {
			done := make(chan struct{})
			// Each run gets a namespace of its own on a thread that is
			// never unlocked (the runtime discards it with the namespace).
			go func() {
				defer close(done)
				runtime.LockOSThread()
				benchWriteUDP(b, c.offload, c.cap)
			}()
			<-done
		})
	}
}

func benchWriteUDP(b *testing.B, offload bool, capacity int) {
	if os.Geteuid() != 0 {
		b.Error("needs root")
		return
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		b.Errorf("unshare: %v", err)
		return
	}
	var dev Device
	var err error
	if offload {
		dev, err = OpenOffload(OffloadConfig{Name: testIfName, MTU: 1500}, nil)
	} else {
		dev, err = OpenWater(WaterConfig{Name: testIfName, MTU: 1500})
	}
	if err != nil {
		b.Errorf("open: %v", err)
		return
	}
	defer dev.Close()
	for _, args := range [][]string{
		{"addr", "add", "10.99.0.1/24", "dev", testIfName},
		{"link", "set", "dev", testIfName, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			b.Errorf("ip %v: %v\n%s", args, err, out)
			return
		}
	}
	const n, payloadLen, port = 64, 1420 - 28, 7777
	sock, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP(tunAddr[:]), Port: port})
	if err != nil {
		b.Error(err)
		return
	}
	defer sock.Close()
	rc, _ := sock.SyscallConn()
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	})
	pkts := make([][]byte, n)
	bufs := make([][]byte, n)
	for i := range pkts {
		pkts[i] = udpPacket(peerAddr, tunAddr, 5555, port, uint16(i), bytes.Repeat([]byte{byte(i)}, payloadLen))
		bufs[i] = make([]byte, testOffset+len(pkts[i]), capacity)
	}
	rbuf, oob := make([]byte, 1<<16), make([]byte, 64)
	_ = sock.SetReadDeadline(time.Now().Add(time.Minute))
	b.SetBytes(n * 1420)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i := range bufs {
			bufs[i] = bufs[i][:testOffset+len(pkts[i])]
			copy(bufs[i][testOffset:], pkts[i])
		}
		if w, err := dev.Write(bufs, testOffset); w != n || err != nil {
			b.Errorf("Write = %d, %v", w, err)
			return
		}
		for got := 0; got < n; {
			m, oobn, _, _, err := sock.ReadMsgUDPAddrPort(rbuf, oob)
			if err != nil {
				b.Errorf("receive: %v", err)
				return
			}
			seg := groSize(oob[:oobn])
			if seg == 0 {
				seg = m
			}
			got += (m + seg - 1) / seg
		}
	}
}
