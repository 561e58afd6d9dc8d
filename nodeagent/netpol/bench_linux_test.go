package netpol

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Benchmarks of the table in a real kernel (root; network namespaces):
// what 1,000 policies over 10,000 pods cost a node's forwarding. Run
// them with -benchtime 3x on a quiet machine (docs/concepts/network-policy.md,
// "Cost").

// Ports of the throughput lab: the server pod admits TCP 9100-9110 from
// monitoring namespaces, where the client pod is, and nothing on 80.
const (
	benchPort   = 9100 // iperf3
	benchConnPt = 9101 // connection-rate echo server
	benchDenied = 80
)

// benchInput is scale's 1,000 policies over 10,000 pods on node n0
// (one of 100 nodes), plus the lab's two pods: the server (addrB, on n0,
// in ns1: isolated by ns1's deny and admitted on TCP 9100-9110 by its
// "monitoring" policy, among the six of ns1's ten policies that select
// it) and the client (addrA, on n5, in ns2, a monitoring namespace).
func benchInput(nodes int) Input {
	in := scale(100, 100, nodes)
	srv := withPort(withIPs(mkPod("ns1", "bench-server", "n0", map[string]string{"app": "a1", "role": "backend"}), addrB, addrB6), "http", corev1.ProtocolTCP, 8080)
	cl := withIPs(mkPod("ns2", "bench-client", "n5", map[string]string{"app": "a3", "role": "frontend"}), addrA, addrA6)
	in.Pods = append(in.Pods, FromPod(srv), FromPod(cl))
	return in
}

// iperf3 runs one TCP stream from ns to addr:port for d and returns the
// receiver's bits per second.
func iperf3(b *testing.B, ns, addr string, port int, d time.Duration) float64 {
	b.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "iperf3", "-c", addr, "-p", strconv.Itoa(port),
		"-t", strconv.Itoa(int(d.Seconds())), "-J").Output()
	if err != nil {
		b.Fatalf("iperf3 -c %s: %v\n%s", addr, err, out)
	}
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		b.Fatalf("iperf3 output: %v\n%s", err, out)
	}
	return r.End.SumReceived.BitsPerSecond
}

// connRate opens and closes TCP connections (each echoes one message)
// from ns to addr for d and returns them per second: every one's first
// packet walks the server pod's chain when the table is loaded.
func connRate(b *testing.B, ns, addr string, d time.Duration) float64 {
	b.Helper()
	n := 0
	var ferr error
	in(b, ns, func() {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				ferr = err
				return
			}
			err = echo(c)
			// A reset, not a FIN: no TIME_WAIT, so the client's ports
			// (and the node's conntrack tuples) are free again at
			// once and a reused port never waits for a retransmit.
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
			if err != nil {
				ferr = err
				return
			}
			n++
		}
	})
	if ferr != nil {
		b.Fatalf("connection %d to %s: %v", n+1, addr, ferr)
	}
	return float64(n) / d.Seconds()
}

// BenchmarkThroughput: a TCP stream (iperf3, 3 s) and new TCP
// connections (2 s) through the lab's node (pod a → node → pod b),
// without the table (no-table) and with the 1,000 policies loaded: the
// node's own share (node: 100 local pods, ~1,000 rules) and the worst
// case (all-local: every pod local, ~5,900 rules, 40,000 map elements);
// the server pod isolated and admitted by one of the six policies that
// select it. Before each measurement with the table it checks that the
// table enforces: a connection to a port no policy admits is refused.
func BenchmarkThroughput(b *testing.B) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Skip("needs iperf3 (make deps)")
	}
	l := newLab(b)
	tbl := l.table(b)
	node, allLocal := Compile(benchInput(100)), Compile(benchInput(1))
	serve(b, l.b, benchConnPt, benchDenied)
	srv := exec.Command("ip", "netns", "exec", l.b, "iperf3", "-s", "-p", strconv.Itoa(benchPort))
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	time.Sleep(300 * time.Millisecond) // iperf3 -s listening
	const streamFor, connsFor = 3 * time.Second, 2 * time.Second
	variants := []struct {
		name string
		rs   *Ruleset
	}{{"no-table", nil}, {"node", node}, {"all-local", allLocal}}
	load := func(rs *Ruleset) {
		b.Helper()
		if rs == nil {
			if err := tbl.Remove(); err != nil {
				b.Fatal(err)
			}
		} else {
			if err := tbl.Write(rs); err != nil {
				b.Fatal(err)
			}
			if err := probe(b, l.a, "tcp", hp(addrB, benchDenied)); err == nil {
				b.Fatal("the table is loaded, and port 80, which no policy admits, answered")
			}
		}
		if err := probe(b, l.a, "tcp", hp(addrB, benchConnPt)); err != nil {
			b.Fatalf("admitted port: %v", err)
		}
	}
	// The variants take turns within each iteration, so that a change
	// of the machine's load falls on all three alike; the medians are
	// reported, each sample logged.
	bps := make([][]float64, len(variants))
	cps := make([][]float64, len(variants))
	for b.Loop() {
		for i, v := range variants {
			load(v.rs)
			bps[i] = append(bps[i], iperf3(b, l.a, addrB, benchPort, streamFor)/1e9)
			cps[i] = append(cps[i], connRate(b, l.a, hp(addrB, benchConnPt), connsFor))
		}
	}
	for i, v := range variants {
		b.ReportMetric(median(bps[i]), v.name+"-Gbit/s")
		b.ReportMetric(median(cps[i]), v.name+"-conns/s")
		b.Logf("%s: Gbit/s %.2f, conns/s %.0f", v.name, bps[i], cps[i])
	}
	b.Logf("node: %d rules, %d map elements; all-local: %d rules, %d map elements",
		node.Stats.Rules, node.Stats.Dispatch, allLocal.Stats.Rules, allLocal.Stats.Dispatch)
}

// median of xs (sorted in place).
func median(xs []float64) float64 {
	slices.Sort(xs)
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)/2]
}

// BenchmarkCompilerMemory: what the compiler's state holds, 1,000
// policies over 10,000 pods: the informers' view (the Input: stripped
// pods, namespaces, policies) and the compiled Ruleset, both live on the
// heap after a GC, and the process's resident size after the compile.
func BenchmarkCompilerMemory(b *testing.B) {
	for _, c := range []struct {
		name  string
		nodes int
	}{{"node", 100}, {"all-local", 1}} {
		b.Run(c.name, func(b *testing.B) {
			var inHeap, rsHeap float64
			for b.Loop() {
				var m0, m1, m2 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				in := scale(100, 100, c.nodes)
				runtime.GC()
				runtime.ReadMemStats(&m1)
				rs := Compile(in)
				runtime.GC()
				runtime.ReadMemStats(&m2)
				inHeap = float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
				rsHeap = float64(m2.HeapAlloc) - float64(m1.HeapAlloc)
				runtime.KeepAlive(in)
				runtime.KeepAlive(rs)
			}
			b.ReportMetric(inHeap/1e6, "input-heap-MB")
			b.ReportMetric(rsHeap/1e6, "ruleset-heap-MB")
			rss, hwm := procStatus("VmRSS:"), procStatus("VmHWM:")
			b.ReportMetric(rss/1e6, "rss-MB")
			b.ReportMetric(hwm/1e6, "peak-rss-MB")
		})
	}
}

// procStatus is a /proc/self/status size field, in bytes.
func procStatus(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	return 0
}
