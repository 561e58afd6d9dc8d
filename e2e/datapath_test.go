package e2e

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	podA  = "10.244.1.10"
	podB  = "10.245.1.10"
	podA6 = "fd00:244:0:1::10"
	podB6 = "fd00:245:0:1::10"
)

// TestTwoSiteDataPath runs the demo topology and checks what the data-path
// issue promises: ICMP both ways, IPv6 pod to pod, a 100 MB TCP transfer
// that arrives intact, and a packet with an inner source outside the
// sender's site dropped and counted at the receiving gateway.
func TestTwoSiteDataPath(t *testing.T) {
	// With expressPriority the kernel sorts flows and the express
	// lane's loops run real-time: everything below runs that way.
	l := startLab(t, "CONFIG_EXTRA_A=expressPriority: 10", "CONFIG_EXTRA_B=expressPriority: 10")

	t.Run("icmp both ways", func(t *testing.T) {
		l.t = t
		l.probe("a-node", "ping", "-src", podA, "-count", "3", podB)
		l.probe("b-node", "ping", "-src", podB, "-count", "3", podA)
	})
	t.Run("ipv6 pod to pod", func(t *testing.T) {
		l.t = t
		l.probe("a-node", "ping", "-src", podA6, "-count", "3", podB6)
		l.probe("b-node", "ping", "-src", podB6, "-count", "3", podA6)
		l.transfer("a-node", podA6, "b-node", podB6, 7001, 4<<20)
	})
	t.Run("tcp 100MB checksummed, pings on the express lane", func(t *testing.T) {
		l.t = t
		sent := `bridgehead_express_datagrams_total{direction="sent"}`
		recv := `bridgehead_express_datagrams_total{direction="received"}`
		a0, b0 := metric(l.metrics("a"), sent), metric(l.metrics("b"), recv)
		if a0 < 0 || b0 < 0 {
			t.Fatalf("gateways do not export %s / %s", sent, recv)
		}
		// As root (CI) and with expressPriority, the kernel steers
		// sparse flows to the express lane, and both of its loops run
		// real-time on both gateways.
		for _, gw := range []string{"a", "b"} {
			m := l.metrics(gw)
			if v := metric(m, "bridgehead_express_steered"); v != 1 {
				t.Errorf("gateway %s: bridgehead_express_steered %v, want 1", gw, v)
			}
			if v := metric(m, "bridgehead_express_realtime_threads"); v != 2 {
				t.Errorf("gateway %s: bridgehead_express_realtime_threads %v, want 2", gw, v)
			}
		}
		l.transfer("a-node", podA, "b-node", podB, 7000, 100<<20)
		// Over veth each GSO run reaches the receiver whole, and a run
		// carries one lane byte: no lane's socket gets another's.
		if v := metric(l.metrics("b"), "bridgehead_lane_strays_total"); v != 0 {
			t.Errorf("gateway B: bridgehead_lane_strays_total %v after the transfer, want 0", v)
		}
		// A bulk flow goes express only for its first burst (16 KiB)
		// and its handshake: of ~75,000 datagrams, a few dozen.
		d := metric(l.metrics("b"), recv) - b0
		t.Logf("gateway B read %v datagrams on its express socket during the 100 MB transfer", d)
		if d > 200 {
			t.Errorf("gateway B read %v datagrams on its express socket during a 100 MB transfer, want a bulk flow's first burst only (<= 200)", d)
		}
		// Pings are sparse: each request and reply crosses on the
		// express lanes (A sends, B receives, and back).
		a1, b1 := metric(l.metrics("a"), sent), metric(l.metrics("b"), recv)
		l.probe("a-node", "ping", "-src", podA, "-count", "5", podB)
		l.waitMetric("a", sent, a1+5)
		l.waitMetric("b", recv, b1+5)
		l.transfer("b-node", podB, "a-node", podA, 7002, 10<<20)
	})
	t.Run("spoofed inner source dropped", func(t *testing.T) {
		l.t = t
		series := `bridgehead_dropped_packets_total{direction="outside",reason="spoofed_source"}`
		before := metric(l.metrics("b"), series)
		if before < 0 {
			t.Fatalf("B does not export %s", series)
		}
		// Node A sends from an address outside site A. Gateway A's
		// kernel would drop it by reverse-path filtering; turn that
		// off so the packet reaches the tunnel and B must catch it.
		l.mustExec("a-gw", "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.lan.rp_filter=0")
		l.mustExec("a-node", "ip", "addr", "add", "10.99.0.1/32", "dev", "lo")
		l.probe("a-node", "udp-send", "-src", "10.99.0.1", "-count", "5", podB+":9999")
		l.waitMetric("b", series, before+5)
		// Genuine traffic is unaffected.
		l.probe("a-node", "ping", "-src", podA, "-count", "1", podB)
	})
	t.Run("garbage on the wire is counted", func(t *testing.T) {
		l.t = t
		runt := `bridgehead_dropped_packets_total{direction="outside",reason="runt"}`
		unknown := `bridgehead_dropped_packets_total{direction="outside",reason="unknown_index"}`
		m := l.metrics("b")
		// The lab runs as root, so the eBPF early-drop filter is on
		// and the garbage below is dropped and counted in the kernel.
		if v := metric(m, "bridgehead_kernel_filter_attached"); v != 1 {
			t.Errorf("bridgehead_kernel_filter_attached = %v on B, want 1", v)
		}
		r0, u0 := metric(m, runt), metric(m, unknown)
		l.probe("a-gw", "udp-send", "-size", "2", "-count", "3", "203.0.113.2:51820")
		// 64 bytes starting with zero: unknown message type 0. Transport-looking garbage:
		l.probe("a-gw", "udp-send", "-size", "64", "-count", "2", "-fill", "4", "203.0.113.2:51820")
		l.waitMetric("b", runt, r0+3)
		l.waitMetric("b", unknown, u0+2)
		l.probe("a-node", "ping", "-src", podA, "-count", "1", podB)
	})
	t.Run("path MTU: pods at 1500, tunnel at 1420", func(t *testing.T) {
		l.t = t
		// 1500-byte packets with DF: the gateway answers "fragmentation
		// needed" / "packet too big" and the sender adapts. One echo
		// per direction may be lost while each end learns the path MTU
		// (the request, then the equally large reply).
		l.probe("a-node", "ping", "-src", podA, "-size", "1472", "-count", "5", "-allow-loss", "2", podB)
		l.probe("a-node", "ping", "-src", podA6, "-size", "1452", "-count", "5", "-allow-loss", "2", podB6)
		// Large exchanges that must be fragmented at the source.
		l.probe("b-node", "ping", "-src", podB, "-size", "8000", "-count", "3", "-allow-loss", "1", podA)
		l.probe("b-node", "ping", "-src", podB6, "-size", "8000", "-count", "3", "-allow-loss", "1", podA6)
	})
	t.Run("node routes come from bridgehead routes", func(t *testing.T) {
		l.t = t
		routes := l.mustExec("a-node", "ip", "route")
		for _, want := range []string{"10.245.0.0/16 via 10.224.0.4", "192.168.50.0/24 via 10.224.0.4"} {
			if !strings.Contains(routes, want) {
				t.Errorf("node A routes lack %q:\n%s", want, routes)
			}
		}
	})
}

// TestPortableBackend runs the lab with TUN offloads turned off: the
// portable water backend must carry the same traffic, over two lanes (two
// queues of a multi-queue TUN and two sockets per gateway), each of which
// carries some of it.
func TestPortableBackend(t *testing.T) {
	l := startLab(t, "OFFLOAD=false", "RUN_ARGS=--lanes 2")
	for _, s := range []string{"a", "b"} {
		l.waitLog(s, "using the portable backend", 1)
		if log := l.waitLog(s, "data path lanes", 1); !strings.Contains(log, "lanes=2") {
			t.Fatalf("gateway %s does not run 2 lanes:\n%s", s, log)
		}
	}
	l.probe("a-node", "ping", "-src", podA, "-count", "2", podB)
	l.probe("b-node", "ping", "-src", podB6, "-count", "2", podA6)
	l.transfer("a-node", podA, "b-node", podB, 7030, 20<<20)
	// The kernel puts each flow on a queue by its hash: more connections,
	// each way, until every queue of each gateway's TUN sent at least
	// 128 KiB (tc's per-queue counters of bh0's mq qdisc; the kernel's
	// own packets on bh0 are far fewer), each one checked end to end.
	const minBytes = 128 << 10
	for port := 7031; ; port++ {
		qa, qb := tunQueuesUsed(l, "a-gw", minBytes), tunQueuesUsed(l, "b-gw", minBytes)
		if qa >= 2 && qb >= 2 {
			t.Logf("TUN queues that sent >= %d bytes: gateway A %d, B %d, after %d extra connections each way", minBytes, qa, qb, port-7031)
			break
		}
		if port == 7031+24 {
			t.Fatalf("after 25 connections each way not every TUN queue carried traffic:\na-gw:\n%s\nb-gw:\n%s",
				l.mustExec("a-gw", "tc", "-s", "qdisc", "show", "dev", "bh0"), l.mustExec("b-gw", "tc", "-s", "qdisc", "show", "dev", "bh0"))
		}
		l.transfer("a-node", podA, "b-node", podB, port, 256<<10)
		l.transfer("b-node", podB, "a-node", podA, port, 256<<10)
	}
}

// tunQueuesUsed counts the child qdiscs of bh0's mq root in namespace ns
// that have sent at least minBytes: the TUN queues the kernel routed
// traffic into.
func tunQueuesUsed(l *lab, ns string, minBytes int) int {
	out := l.mustExec(ns, "tc", "-s", "qdisc", "show", "dev", "bh0")
	n := 0
	child := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "qdisc":
			child = slices.Contains(f, "parent")
		case child && len(f) >= 3 && f[0] == "Sent" && f[2] == "bytes":
			if b, err := strconv.Atoi(f[1]); err == nil && b >= minBytes {
				n++
			}
		}
	}
	return n
}

// TestAutoMTU: with interface.mtu: auto the tunnel MTU is the WAN link's
// (1500) minus bridgehead's IPv4 encapsulation overhead (20 + 8 + 32).
func TestAutoMTU(t *testing.T) {
	l := startLab(t, "TUN_MTU=auto", "WAN_MTU=1400")
	link := l.mustExec("a-gw", "ip", "link", "show", "bh0")
	if !strings.Contains(link, "mtu 1340 ") {
		t.Fatalf("bh0 with a 1400-byte WAN: want mtu 1340 (1400 - 60):\n%s", link)
	}
	l.waitLog("a", "tunnel MTU derived from the WAN path", 1)
	// Full-size packets still cross: MSS clamping keeps TCP within it.
	l.transfer("a-node", podA, "b-node", podB, 7040, 8<<20)
}
