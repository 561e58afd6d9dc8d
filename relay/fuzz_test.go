package relay

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FuzzRequest feeds arbitrary bytes to a relay as a client's request.
// The relay must never panic, must answer with a well-formed response of
// a status it is allowed to send (or nothing, after a timeout or a TLS
// failure), and must answer 200 only to a CONNECT the policy admits.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		"CONNECT 127.0.1.5:10250 HTTP/1.1\r\nHost: 127.0.1.5:10250\r\n\r\n",
		"CONNECT 127.0.1.5:10250 HTTP/1.0\r\n\r\nearly bytes",
		"CONNECT [::ffff:127.0.1.5]:10250 HTTP/1.1\r\n\r\n",
		"CONNECT 127.0.3.5:10250 HTTP/1.1\r\n\r\n",
		"CONNECT 127.0.2.5:10250 HTTP/1.1\r\n\r\n",
		"CONNECT 127.0.1.5:22 HTTP/1.1\r\n\r\n",
		"CONNECT kubelet:10250 HTTP/1.1\r\n\r\n",
		"CONNECT [fe80::1%eth0]:10250 HTTP/1.1\r\n\r\n",
		"GET http://127.0.1.5:10250/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT 127.0.1.5:10250 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"CONNECT 127.0.1.5:10250",
		"\x16\x03\x01\x00\x05hello",
		"",
	} {
		f.Add([]byte(s))
	}
	cfg := baseConfig(10250)
	cfg.HeaderTimeout = 100 * time.Millisecond
	allowed := []int{200, 400, 403, 405, 502, 503, 504}
	f.Fuzz(func(t *testing.T, req []byte) {
		r, err := New(Options{Config: cfg, Registry: prometheus.NewRegistry(),
			Dial: func(context.Context, netip.Addr, netip.AddrPort) (net.Conn, error) {
				up, peer := net.Pipe()
				peer.Close()
				return up, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		client, server := net.Pipe()
		r.mu.Lock()
		r.pending++ // as accept does
		r.mu.Unlock()
		done := make(chan struct{})
		go func() { defer close(done); r.handle(server, r.cfg.Load(), netip.Prefix{}) }()
		go func() { client.Write(req) }()
		client.SetReadDeadline(time.Now().Add(time.Second))
		var got bytes.Buffer
		io.Copy(&got, client)
		client.Close()
		<-done
		r.Close()
		if got.Len() == 0 {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(&got), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("malformed response %q to %q: %v", got.Bytes(), req, err)
		}
		if !slices.Contains(allowed, resp.StatusCode) {
			t.Fatalf("status %d to %q", resp.StatusCode, req)
		}
		if resp.StatusCode != 200 {
			return
		}
		parsed, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(req)))
		if err != nil || parsed.Method != http.MethodConnect {
			t.Fatalf("200 to a request net/http does not read as CONNECT: %q", req)
		}
		dst, err := netip.ParseAddrPort(parsed.RequestURI)
		if err != nil || cfg.decide(dst).reason != ReasonNone {
			t.Fatalf("200 to CONNECT %q, which the policy refuses", parsed.RequestURI)
		}
	})
}
