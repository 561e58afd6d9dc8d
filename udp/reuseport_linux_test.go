//go:build linux

package udp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestListenLanesSpreadsSources opens four sockets on one port, sends from
// 64 source ports and checks that every socket receives, that each source
// port's datagrams all reach one socket, and that nothing is lost.
func TestListenLanesSpreadsSources(t *testing.T) {
	const lanes, sources, perSource = 4, 64, 8
	binds, err := ListenLanes(netip.MustParseAddrPort("127.0.0.1:0"), lanes, Options{})
	if err != nil {
		t.Fatal(err)
	}
	port := binds[0].LocalAddr().Port()
	for i, b := range binds {
		if b.LocalAddr().Port() != port {
			t.Fatalf("socket %d on port %d, want %d", i, b.LocalAddr().Port(), port)
		}
	}
	seen := make([]map[uint16]int, lanes) // per socket: source port -> datagrams
	for l := range binds {
		seen[l] = map[uint16]int{}
	}
	var mu sync.Mutex
	defer receiveEach(binds, &mu, func(l int, _ []byte, ep netip.AddrPort) { seen[l][ep.Port()]++ })()

	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)}
	msg := make([]byte, 16)
	for range sources {
		c, err := net.DialUDP("udp4", nil, dst)
		if err != nil {
			t.Fatal(err)
		}
		for i := range perSource {
			binary.BigEndian.PutUint32(msg, uint32(i))
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	count := func() (total int, per []int, split []uint16) {
		mu.Lock()
		defer mu.Unlock()
		per = make([]int, lanes)
		on := map[uint16]int{}
		for l := range seen {
			for p, c := range seen[l] {
				if prev, ok := on[p]; ok && prev != l {
					split = append(split, p)
				}
				on[p] = l
				per[l] += c
				total += c
			}
		}
		return total, per, split
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if total, _, _ := count(); total >= sources*perSource || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	total, per, split := count()
	t.Logf("datagrams per socket: %v", per)
	if total != sources*perSource {
		t.Errorf("received %d datagrams, want %d", total, sources*perSource)
	}
	if len(split) > 0 {
		t.Errorf("source ports split over sockets: %v", split)
	}
	for l, c := range per {
		if c == 0 {
			t.Errorf("socket %d received nothing from %d source ports", l, sources)
		}
	}
}

func TestListenLanesErrors(t *testing.T) {
	for _, n := range []int{0, -2, MaxLanes + 1} {
		if _, err := ListenLanes(netip.MustParseAddrPort("127.0.0.1:0"), n, Options{}); err == nil {
			t.Errorf("%d sockets: no error", n)
		}
	}
	// A port held without SO_REUSEPORT cannot be joined; nothing leaks.
	b, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := ListenLanes(b.LocalAddr(), 2, Options{}); err == nil {
		t.Error("joined a port bound without SO_REUSEPORT")
	}
}

// TestListenLanesSteersByLaneByte: from one source port, transport
// messages go to socket (lane byte mod n), each lane byte's in order;
// messages without a lane byte, and other types, follow the kernel's hash
// (one source port: one socket). Receive coalescing is on.
func TestListenLanesSteersByLaneByte(t *testing.T) {
	for _, tc := range []struct {
		name, network, listen string
		dst                   net.IP
	}{
		{"ipv4", "udp4", "127.0.0.1:0", net.IPv4(127, 0, 0, 1)},
		{"ipv6", "udp6", "[::1]:0", net.IPv6loopback},
		{"ipv4 to dual-stack", "udp4", "[::]:0", net.IPv4(127, 0, 0, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const lanes, perLane = 3, 50
			binds, err := ListenLanes(netip.MustParseAddrPort(tc.listen), lanes, Options{})
			if err != nil {
				t.Fatal(err)
			}
			type got struct {
				socket int
				msg    [4]byte // type, lane byte, sequence
			}
			for l, b := range binds {
				if b.gro != b.GSO() { // the kernel has both offloads or neither
					t.Errorf("socket %d: GRO %v, GSO %v", l, b.gro, b.GSO())
				}
			}
			var mu sync.Mutex
			var recv []got
			defer receiveEach(binds, &mu, func(l int, buf []byte, _ netip.AddrPort) {
				recv = append(recv, got{socket: l, msg: [4]byte(buf[:4])})
			})()
			c, err := net.DialUDP(tc.network, nil, &net.UDPAddr{IP: tc.dst, Port: int(binds[0].LocalAddr().Port())})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Lane bytes 0-6 and a handshake-type message, interleaved.
			kinds := [][2]byte{{4, 0}, {4, 1}, {4, 2}, {4, 3}, {4, 4}, {4, 5}, {4, 255}, {1, 7}}
			msg := make([]byte, 32)
			for seq := range perLane {
				for _, k := range kinds {
					msg[0], msg[1], msg[2], msg[3] = k[0], k[1], 0, byte(seq)
					if _, err := c.Write(msg); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := perLane * len(kinds)
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				n := len(recv)
				mu.Unlock()
				if n >= want || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(recv) != want {
				t.Fatalf("received %d datagrams, want %d", len(recv), want)
			}
			socketOf := map[[2]byte]int{}
			next := map[[2]byte]byte{}
			for _, g := range recv {
				k := [2]byte{g.msg[0], g.msg[1]}
				if s, ok := socketOf[k]; ok && s != g.socket {
					t.Errorf("type %d lane %d on sockets %d and %d", k[0], k[1], s, g.socket)
				}
				socketOf[k] = g.socket
				if g.msg[3] != next[k] {
					t.Errorf("type %d lane %d: sequence %d after %d", k[0], k[1], g.msg[3], next[k]-1)
				}
				next[k] = g.msg[3] + 1
			}
			for _, k := range kinds[1:7] {
				if want := int(k[1]) % lanes; socketOf[k] != want {
					t.Errorf("lane byte %d on socket %d, want %d", k[1], socketOf[k], want)
				}
			}
			// One source port: no lane byte and handshakes go where the hash says, together.
			if socketOf[kinds[0]] != socketOf[kinds[7]] {
				t.Errorf("lane byte 0 on socket %d, handshake type on %d: want one hashed socket", socketOf[kinds[0]], socketOf[kinds[7]])
			}
		})
	}
}

// TestGSORunsKeepOneLaneByte: a segmented message never spans two lane
// bytes (the receiver steers it whole by its first datagram).
func TestGSORunsKeepOneLaneByte(t *testing.T) {
	s := newSendState(64, nil)
	msg := func(lane byte) []byte { b := make([]byte, 100); b[0], b[1] = msgTransport, lane; return b }
	other := make([]byte, 100) // not a transport message: key 0
	s.bufs = [][]byte{msg(1), msg(1), msg(2), msg(2), msg(2), msg(0), other, msg(1)}
	s.maxSeg = maxGSOBytes
	n := s.build(0, 0, 0)
	var runs []int
	for m := range n {
		end := len(s.bufs)
		if m+1 < n {
			end = s.first[m+1]
		}
		runs = append(runs, end-s.first[m])
	}
	if fmt.Sprint(runs) != "[2 3 2 1]" {
		t.Errorf("messages of %v datagrams, want [2 3 2 1]", runs)
	}
}

// TestListenLanesCoalescedRuns: a sender's GSO runs, one per lane byte,
// arrive coalesced at socket (lane byte mod n), whole and in order, as
// they do between gateways over veth or loopback.
func TestListenLanesCoalescedRuns(t *testing.T) {
	const lanes, perRun, rounds = 3, 20, 10
	binds, err := ListenLanes(netip.MustParseAddrPort("127.0.0.1:0"), lanes, Options{RecvBuffer: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a := listen(t, "127.0.0.1:0", Options{})
	needOffloads(t, a)
	needOffloads(t, binds[0])
	// Lane bytes 1, 2, 4 (sockets 1, 2, 1), perRun equal datagrams
	// each: one GSO message per lane byte and Send.
	laneBytes := []byte{1, 2, 4}
	var out [][]byte
	for _, lb := range laneBytes {
		for seq := range perRun {
			m := make([]byte, 1000)
			m[0], m[1], m[2], m[3] = msgTransport, lb, 0, byte(seq)
			out = append(out, m)
		}
	}
	var mu sync.Mutex
	type got struct{ socket, lane, seq int }
	var recv []got
	stop := receiveEach(binds, &mu, func(l int, buf []byte, _ netip.AddrPort) {
		recv = append(recv, got{l, int(buf[1]), int(buf[3])})
	})
	dst := binds[0].LocalAddr()
	for range rounds {
		if err := a.Send(out, dst); err != nil {
			t.Fatal(err)
		}
	}
	want := rounds * len(out)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(recv)
		mu.Unlock()
		if n >= want {
			break
		}
	}
	stop()
	if len(recv) != want {
		t.Fatalf("received %d datagrams, want %d", len(recv), want)
	}
	next := map[int]int{}
	for _, g := range recv {
		if g.socket != g.lane%lanes {
			t.Errorf("lane byte %d on socket %d, want %d", g.lane, g.socket, g.lane%lanes)
		}
		if g.seq != next[g.lane]%perRun {
			t.Errorf("lane byte %d: datagram %d after %d", g.lane, g.seq, next[g.lane]-1)
		}
		next[g.lane]++
	}
	var coalesced uint64
	for _, b := range binds {
		coalesced += b.groRecv.coalesced
	}
	t.Logf("%d coalesced messages", coalesced)
	if coalesced == 0 {
		t.Error("no run arrived coalesced")
	}
}

// receiveEach receives on every bind in a goroutine of its own and calls
// fn, holding mu, for each datagram with the bind's index. The returned
// func closes the binds and waits for the goroutines; the caller reads
// what fn collected under mu.
func receiveEach(binds []*LinuxBind, mu *sync.Mutex, fn func(lane int, buf []byte, ep netip.AddrPort)) (stop func()) {
	var wg sync.WaitGroup
	for l, b := range binds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs, sizes, eps := make([][]byte, 8), make([]int, 8), make([]netip.AddrPort, 8)
			for i := range bufs {
				bufs[i] = make([]byte, 64)
			}
			for {
				n, err := b.Receive(bufs, sizes, eps)
				if err != nil {
					return
				}
				mu.Lock()
				for i := range n {
					fn(l, bufs[i][:sizes[i]], eps[i])
				}
				mu.Unlock()
			}
		}()
	}
	return func() {
		for _, b := range binds {
			b.Close()
		}
		wg.Wait()
	}
}

// TestListenExpressSteersExpressLane: lane byte ExpressLane reaches the
// express socket, in order, and no other lane byte does; the other lane
// bytes go to lane socket (byte mod n). The lane sockets keep receive
// coalescing, and the express socket never has it.
func TestListenExpressSteersExpressLane(t *testing.T) {
	for _, lanes := range []int{1, 3} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			laneBinds, express, err := ListenExpress(netip.MustParseAddrPort("127.0.0.1:0"), lanes, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(laneBinds) != lanes || express == nil {
				t.Fatalf("%d lane sockets and express %v, want %d and one", len(laneBinds), express, lanes)
			}
			if express.LocalAddr() != laneBinds[0].LocalAddr() {
				t.Errorf("express socket on %v, lanes on %v", express.LocalAddr(), laneBinds[0].LocalAddr())
			}
			for l, b := range laneBinds {
				if b.GRO() != b.GSO() {
					t.Errorf("lane socket %d: GRO %v, GSO %v", l, b.GRO(), b.GSO())
				}
			}
			if express.GRO() {
				t.Error("express socket has GRO on")
			}
			all := append(append([]*LinuxBind{}, laneBinds...), express)
			var mu sync.Mutex
			socketOf := map[byte]map[int]int{}
			var order []byte
			defer receiveEach(all, &mu, func(s int, buf []byte, _ netip.AddrPort) {
				if socketOf[buf[1]] == nil {
					socketOf[buf[1]] = map[int]int{}
				}
				socketOf[buf[1]][s]++
				if buf[1] == ExpressLane {
					order = append(order, buf[3])
				}
			})()
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(laneBinds[0].LocalAddr().Port())})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const perLane = 40
			laneBytes := []byte{1, 2, 3, 4, ExpressLane, 254}
			msg := make([]byte, 32)
			for seq := range perLane {
				for _, lb := range laneBytes {
					msg[0], msg[1], msg[3] = msgTransport, lb, byte(seq)
					if _, err := c.Write(msg); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := perLane * len(laneBytes)
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				n := 0
				for _, m := range socketOf {
					for _, c := range m {
						n += c
					}
				}
				mu.Unlock()
				if n >= want || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, lb := range laneBytes {
				wantSocket := int(lb) % lanes
				if lb == ExpressLane {
					wantSocket = lanes
				}
				if got := socketOf[lb]; len(got) != 1 || got[wantSocket] != perLane {
					t.Errorf("lane byte %d: datagrams by socket %v, want all %d on socket %d", lb, got, perLane, wantSocket)
				}
			}
			for i, seq := range order {
				if int(seq) != i {
					t.Fatalf("express lane out of order: %v", order)
				}
			}
		})
	}
}

// TestListenExpressKeepsUnsteeredOff: datagrams without a lane byte
// (transport messages of a session whose peer has not yet said it reads
// lane bytes, handshakes, other types) from many source ports all reach
// lane sockets, none the express socket. With the kernel's hash over all
// n+1 sockets about one port in n+1 would land on the express socket.
func TestListenExpressKeepsUnsteeredOff(t *testing.T) {
	for _, lanes := range []int{1, 3} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			laneBinds, express, err := ListenExpress(netip.MustParseAddrPort("127.0.0.1:0"), lanes, Options{})
			if err != nil {
				t.Fatal(err)
			}
			all := append(append([]*LinuxBind{}, laneBinds...), express)
			var mu sync.Mutex
			bySocket := map[int]int{}
			defer receiveEach(all, &mu, func(s int, _ []byte, _ netip.AddrPort) { bySocket[s]++ })()
			const ports = 48
			kinds := []byte{msgTransport, 1, 2, 3, 9} // lane byte 0, initiation, response, cookie, unknown
			msg := make([]byte, 32)
			for range ports {
				c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(laneBinds[0].LocalAddr().Port())})
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range kinds {
					msg[0], msg[1] = k, 0
					if _, err := c.Write(msg); err != nil {
						t.Fatal(err)
					}
				}
				c.Close()
			}
			want := ports * len(kinds)
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				n := 0
				for _, c := range bySocket {
					n += c
				}
				mu.Unlock()
				if n >= want || time.Now().After(deadline) {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if bySocket[lanes] != 0 {
				t.Errorf("%d of %d datagrams without a lane byte reached the express socket (by socket: %v)", bySocket[lanes], want, bySocket)
			}
			n := 0
			for _, c := range bySocket {
				n += c
			}
			if n != want {
				t.Errorf("%d datagrams received, want %d (by socket: %v)", n, want, bySocket)
			}
		})
	}
}
