package relay

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkConnectSetup measures one relayed connection's setup as a
// client sees it: TCP connect to the relay, CONNECT, the relay's dial to
// the destination (loopback here, so the tunnel's RTT is not in it) and
// the 200. It reports the p50 and p99 of the iterations.
//
//	go test -run '^$' -bench ConnectSetup -benchtime 5000x ./relay/
func BenchmarkConnectSetup(b *testing.B) {
	up := acceptServer(b, "127.0.1.5:0")
	cfg := baseConfig(up.Port())
	// Closed connections wind down after the client has gone on.
	cfg.MaxConnections, cfg.MaxConnectionsPerDestination = 100000, 100000
	f := startRelay(b, cfg)
	req := []byte(connectTo(up.String()))
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("%v %v", resp, err)
		}
		durs = append(durs, time.Since(start))
		c.Close()
	}
	b.StopTimer()
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(durs[(len(durs)*99)/100].Microseconds()), "p99-µs")
}

// BenchmarkIdleConnMemory measures what the relay holds per idle relayed
// connection: heap and goroutine stacks of n relayed connections minus
// those of n direct connections to the same server (both ends of every
// connection live in this process, so the difference is the relay's
// share: its two sockets, two goroutines and its bookkeeping). Kernel
// socket buffers are not counted.
//
//	go test -run '^$' -bench IdleConnMemory -benchtime 1x ./relay/
func BenchmarkIdleConnMemory(b *testing.B) {
	const n = 1000
	up := acceptServer(b, "127.0.1.5:0")
	cfg := baseConfig(up.Port())
	cfg.MaxConnections, cfg.MaxConnectionsPerDestination = 2*n, 2*n
	f := startRelay(b, cfg)
	for range b.N {
		base := inUse()
		var direct []net.Conn
		for range n {
			c, err := net.Dial("tcp", up.String())
			if err != nil {
				b.Fatal(err)
			}
			direct = append(direct, c)
		}
		time.Sleep(200 * time.Millisecond)
		directBytes := inUse() - base
		for _, c := range direct {
			c.Close()
		}
		time.Sleep(200 * time.Millisecond)

		base = inUse()
		var relayed []net.Conn
		for range n {
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				b.Fatal(err)
			}
			io.WriteString(c, connectTo(up.String()))
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("%v %v", resp, err)
			}
			relayed = append(relayed, c)
		}
		time.Sleep(200 * time.Millisecond)
		relayedBytes := inUse() - base
		if st := f.r.Status(); st.Active != n {
			b.Fatalf("%d active, want %d", st.Active, n)
		}
		for _, c := range relayed {
			c.Close()
		}
		b.ReportMetric(float64(relayedBytes-directBytes)/n, "B/idle-conn")
		b.ReportMetric(float64(relayedBytes)/n, "B/conn-with-ends")
	}
}

// inUse is heap in use plus goroutine stacks, after a collection.
func inUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// acceptServer accepts connections and holds them open, reading, until
// the peer closes: an idle destination.
func acceptServer(tb testing.TB, addr string) netip.AddrPort {
	tb.Helper()
	return echoServer(tb, addr)
}
