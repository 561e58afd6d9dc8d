package controller

import (
	"context"
	"fmt"
	"mime"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// BenchmarkNodeSyncProtobuf answers issue 34's "protobuf on the clients
// where it helps" for the controller's largest read: one Node informer
// (with transformNode, as the controller runs it) synced from the real
// API server over BRIDGEHEAD_INFORMER_NODES (default 10,000)
// kubelet-like Nodes, once through a clientset with ContentType
// application/json and once through one with ContentType unset, as the
// binary builds its clients: client-go's generated clients then ask for
// application/vnd.kubernetes.protobuf for built-in kinds. The two are
// interleaved in each iteration so that both see the same machine, and
// each checks that the API server answered in its format. Per format: sync-ms (factory start to
// cache synced), alloc-MiB (all allocation during the sync), heap-MiB
// (the cache, live after GC) and wire-MiB (bytes read from the API
// server's connections: TLS records of gzip-compressed responses, what
// the network carries). The Site and Gateway informers cannot use
// protobuf at all: the API server serves custom resources as JSON only.
// Run with -benchtime Nx: the figures are means over the N iterations
// of the last run (a first run of one iteration comes before it).
func BenchmarkNodeSyncProtobuf(b *testing.B) {
	env, _, _ := kubeletNodes(b)
	ctx := context.Background()

	var formats []format
	for _, f := range []struct{ name, contentType, want string }{
		{"json", kruntime.ContentTypeJSON, kruntime.ContentTypeJSON},
		{"protobuf", "", kruntime.ContentTypeProtobuf}, // the binary's clients
	} {
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = 2000, 4000
		cfg.ContentType = f.contentType
		answers, wrong := new(atomic.Int64), new(atomic.Pointer[string])
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if err == nil && resp.StatusCode == http.StatusOK {
					if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == f.want {
						answers.Add(1)
					} else {
						msg := fmt.Sprintf("%s answered %s, want %s", r.URL.Path, mt, f.want)
						wrong.Store(&msg)
					}
				}
				return resp, err
			})
		})
		wire := new(atomic.Int64)
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, n: wire}, nil
		}
		formats = append(formats, format{f.name, kubernetes.NewForConfigOrDie(cfg), wire, answers, wrong})
	}

	// Sub-benchmarks, so that their iterations share the Nodes created
	// above (the top level runs once).
	b.Run("transformNode", func(b *testing.B) {
		compareFormats(b, formats, func(f format) (int, func()) {
			fac := informers.NewSharedInformerFactoryWithOptions(f.cs, 0, informers.WithTransform(transformNode))
			inf := fac.Core().V1().Nodes().Informer()
			stop := make(chan struct{})
			fac.Start(stop)
			fac.WaitForCacheSync(stop)
			return len(inf.GetStore().List()), func() {
				close(stop)
				fac.Shutdown()
			}
		})
	})
	// The List a new leader makes to rebuild its allocator (listNodes,
	// as rebuild calls it: every Node kept until the rebuild ends);
	// heap-MiB is what it holds at its end.
	b.Run("rebuildList", func(b *testing.B) {
		compareFormats(b, formats, func(f format) (int, func()) {
			kept, err := listNodes(ctx, f.cs)
			if err != nil {
				b.Fatal(err)
			}
			return len(kept), func() { runtime.KeepAlive(kept) }
		})
	})
}

// format is a clientset that asks for one format, and what it read.
type format struct {
	name string
	cs   kubernetes.Interface
	wire *atomic.Int64
	// answers counts the API server's answers in the format; wrong
	// holds the last answer in another.
	answers *atomic.Int64
	wrong   *atomic.Pointer[string]
}

// compareFormats runs read through each format b.N times, interleaved
// (the first alternates, so that neither always meets the API server's
// caches cold), and reports per format the means of sync-ms, alloc-MiB,
// heap-MiB (live after GC while read's result is held; done releases
// it) and wire-MiB. read returns the Nodes it got, which must be all.
func compareFormats(b *testing.B, formats []format, read func(format) (got int, done func())) {
	nodes := -1
	sums := map[string]*[4]float64{}
	for _, f := range formats {
		sums[f.name] = new([4]float64)
	}
	for i := range b.N {
		order := formats
		if i%2 == 1 {
			order = []format{formats[1], formats[0]}
		}
		for _, f := range order {
			heap0 := heapAfterGC()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			f.wire.Store(0)
			start := time.Now()
			got, done := read(f)
			took := time.Since(start)
			runtime.ReadMemStats(&ms1)
			wire := f.wire.Load()
			heap := heapAfterGC() - heap0
			done()
			if nodes < 0 {
				nodes = got
			}
			if got != nodes || got == 0 {
				b.Fatalf("%s: %d nodes read, %d before", f.name, got, nodes)
			}
			if w := f.wrong.Load(); w != nil || f.answers.Load() == 0 {
				last := "none in another"
				if w != nil {
					last = *w
				}
				b.Fatalf("%s: %d answers in its format; %s", f.name, f.answers.Load(), last)
			}
			m := [4]float64{float64(took.Milliseconds()), float64(ms1.TotalAlloc-ms0.TotalAlloc) / (1 << 20), float64(heap) / (1 << 20), float64(wire) / (1 << 20)}
			b.Logf("%s: %d nodes in %.0f ms, alloc %.1f MiB, heap %.1f MiB, wire %.1f MiB", f.name, got, m[0], m[1], m[2], m[3])
			for k := range m {
				sums[f.name][k] += m[k]
			}
		}
	}
	for _, f := range formats {
		for k, unit := range []string{"sync-ms", "alloc-MiB", "heap-MiB", "wire-MiB"} {
			b.ReportMetric(sums[f.name][k]/float64(b.N), fmt.Sprintf("%s-%s", f.name, unit))
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// countingConn counts the bytes read from the connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}
