package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// callbacks plays kube-apiserver against `bhprobe kubelet`: -echo upgraded
// exec streams and -logs chunked log streams, all open at once, directly
// or through an HTTP CONNECT relay (-proxy). Every byte is checked. Echo
// streams send for -duration (paced by -interval), or -bytes as fast as
// they can; then they half-close and expect exactly what they sent back
// before the server's half-close. Log streams go through Go's
// http.Transport (with Proxy when -proxy is set); echo streams speak
// CONNECT themselves, as kube-apiserver's egress dialer does.
//
// It prints one summary line and exits non-zero if any stream failed.
func callbacks(args []string) error {
	fs := flag.NewFlagSet("callbacks", flag.ExitOnError)
	target := fs.String("target", "", "kubelet address:port")
	src := fs.String("src", "", "source address of direct connections")
	caFile := fs.String("ca", "", "CA of the kubelet's (and the relay's) serving certificate")
	certFile := fs.String("cert", "", "client certificate (presented to the relay and the kubelet)")
	keyFile := fs.String("key", "", "client key")
	proxy := fs.String("proxy", "", "HTTP CONNECT relay: http://HOST:PORT or https://HOST:PORT")
	echo := fs.Int("echo", 25, "upgraded echo streams")
	logs := fs.Int("logs", 25, "chunked log streams")
	duration := fs.Duration("duration", 10*time.Second, "how long each stream stays open")
	interval := fs.Duration("interval", 50*time.Millisecond, "pause between writes of a stream")
	chunk := fs.Int("chunk", 4096, "bytes per write")
	total := fs.Int64("bytes", 0, "echo streams send, and log streams fetch, this many bytes at full speed instead of for -duration")
	timeout := fs.Duration("timeout", 5*time.Minute, "overall timeout")
	setupParallel := fs.Int("setup-parallel", 32, "streams being opened (dial, CONNECT, TLS) at once")
	fs.Parse(args)

	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no certificates", *caFile)
		}
		tlsConf.RootCAs = pool
	}
	if *certFile != "" {
		c, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return err
		}
		tlsConf.Certificates = []tls.Certificate{c}
	}
	cl := &cbClient{target: *target, tls: tlsConf}
	if *src != "" {
		a, err := netip.ParseAddr(*src)
		if err != nil {
			return err
		}
		cl.dialer.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
	}
	cl.dialer.Timeout = 30 * time.Second
	if *proxy != "" {
		u, err := url.Parse(*proxy)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("-proxy %q: want http://HOST:PORT or https://HOST:PORT", *proxy)
		}
		cl.proxy = u
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		errs     []error
		setups   []time.Duration
		sent     atomic.Int64
		received atomic.Int64
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	setup := func(d time.Duration) {
		mu.Lock()
		setups = append(setups, d)
		mu.Unlock()
	}
	// All streams are opened first, then run together: at the
	// midpoint every one of them is open at once.
	start := time.Now()
	ready := make(chan struct{})
	var opened sync.WaitGroup
	opened.Add(*echo + *logs)
	// A stream holds a slot while it opens: 200 TLS handshakes at once
	// starve each other of CPU (the relay's headerTimeout counts), as
	// kube-apiserver's callbacks never all start in the same instant.
	slots := make(chan struct{}, max(*setupParallel, 1))
	opener := func() func() {
		slots <- struct{}{}
		return sync.OnceFunc(func() { <-slots; opened.Done() })
	}
	for i := range *echo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			open := opener()
			defer open()
			s, r, err := cl.echoStream(ctx, uint64(i+1), ready, open, setup, *duration, *interval, *chunk, *total)
			sent.Add(s)
			received.Add(r)
			if err != nil {
				fail(fmt.Errorf("echo stream %d: %w", i+1, err))
			}
		}()
	}
	for i := range *logs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			open := opener()
			defer open()
			r, err := cl.logStream(ctx, uint64(1000+i), ready, open, setup, *duration, *interval, *chunk, *total)
			received.Add(r)
			if err != nil {
				fail(fmt.Errorf("log stream %d: %w", i+1, err))
			}
		}()
	}
	opened.Wait()
	fmt.Printf("%d streams open after %.1fs\n", *echo+*logs, time.Since(start).Seconds())
	close(ready)
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(setups)
	for _, err := range errs {
		fmt.Println("FAIL", err)
	}
	fmt.Printf("streams %d (echo %d, logs %d) in %.1fs: sent %d bytes, received %d bytes, checked; setup p50 %s p99 %s; %d failed\n",
		*echo+*logs, *echo, *logs, elapsed.Seconds(), sent.Load(), received.Load(),
		pct(setups, 50), pct(setups, 99), len(errs))
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d streams failed", len(errs), *echo+*logs)
	}
	return nil
}

// get fetches u and reads its body to the end.
func get(ctx context.Context, hc *http.Client, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}

func pct(s []time.Duration, p int) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, (len(s)*p+99)/100-1)].Round(10 * time.Microsecond)
}

type cbClient struct {
	target string
	tls    *tls.Config
	proxy  *url.URL
	dialer net.Dialer
}

// transport is Go's http.Transport toward the kubelet, through the relay
// when there is one.
func (c *cbClient) transport() *http.Transport {
	tr := &http.Transport{TLSClientConfig: c.tls.Clone(), DialContext: c.dialer.DialContext, ForceAttemptHTTP2: false}
	if c.proxy != nil {
		tr.Proxy = http.ProxyURL(c.proxy)
	}
	return tr
}

// dial opens a TCP connection to the target, through the relay's CONNECT
// when there is one, and returns it with its raw TCP connection.
func (c *cbClient) dial(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	if c.proxy == nil {
		conn, err := c.dialer.DialContext(ctx, "tcp", c.target)
		if err != nil {
			return nil, nil, err
		}
		return conn, bufio.NewReader(conn), nil
	}
	conn, err := c.dialer.DialContext(ctx, "tcp", c.proxy.Host)
	if err != nil {
		return nil, nil, fmt.Errorf("relay: %w", err)
	}
	if c.proxy.Scheme == "https" {
		conf := c.tls.Clone()
		conf.ServerName, _, _ = net.SplitHostPort(c.proxy.Host)
		tc := tls.Client(conn, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("relay TLS: %w", err)
		}
		conn = tc
	}
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: bhprobe\r\n\r\n", c.target, c.target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("relay CONNECT: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, nil, fmt.Errorf("relay CONNECT: %s", resp.Status)
	}
	return conn, br, nil
}

// bufConn reads through a bufio.Reader that may already hold bytes.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// CloseWrite half-closes the connection underneath (close_notify to an
// https relay, then the TCP FIN), so that halfClose of a TLS connection
// over a bufConn ends with a FIN and not only a close_notify.
func (b *bufConn) CloseWrite() error { return halfClose(b.Conn) }

func (c *cbClient) echoStream(ctx context.Context, seed uint64, ready <-chan struct{}, opened func(), setup func(time.Duration),
	duration, interval time.Duration, chunk int, total int64) (sent, received int64, err error) {
	t0 := time.Now()
	raw, br, err := c.dial(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer raw.Close()
	conf := c.tls.Clone()
	conf.ServerName, _, _ = net.SplitHostPort(c.target)
	tc := tls.Client(&bufConn{raw, br}, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		return 0, 0, fmt.Errorf("kubelet TLS: %w", err)
	}
	fmt.Fprintf(tc, "GET /exec HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: bh-echo\r\n\r\n", c.target)
	tbr := bufio.NewReader(tc)
	resp, err := http.ReadResponse(tbr, &http.Request{Method: http.MethodGet})
	if err != nil {
		return 0, 0, fmt.Errorf("upgrade: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return 0, 0, fmt.Errorf("upgrade: %s", resp.Status)
	}
	setup(time.Since(t0))
	if d, ok := ctx.Deadline(); ok {
		raw.SetDeadline(d)
	}
	opened()
	<-ready

	var sentN atomic.Int64
	werr := make(chan error, 1)
	go func() {
		rng := streamRNG(seed)
		buf := make([]byte, chunk)
		end := time.Now().Add(duration)
		for {
			n := len(buf)
			if total > 0 {
				if sentN.Load() >= total {
					break
				}
				n = int(min(int64(n), total-sentN.Load()))
			} else if !time.Now().Before(end) {
				break
			}
			rng.Read(buf[:n])
			if _, err := tc.Write(buf[:n]); err != nil {
				werr <- fmt.Errorf("write after %d bytes: %w", sentN.Load(), err)
				return
			}
			sentN.Add(int64(n))
			if total == 0 {
				time.Sleep(interval)
			}
		}
		werr <- halfClose(tc)
	}()
	rng := streamRNG(seed)
	buf := make([]byte, 64<<10)
	want := make([]byte, 64<<10)
	var got int64
	for {
		n, err := tbr.Read(buf)
		if n > 0 {
			rng.Read(want[:n])
			if !bytes.Equal(buf[:n], want[:n]) {
				return sentN.Load(), got, fmt.Errorf("echoed bytes differ at offset %d", got)
			}
			got += int64(n)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sentN.Load(), got, fmt.Errorf("read after %d bytes: %w", got, err)
		}
	}
	if err := <-werr; err != nil {
		return sentN.Load(), got, err
	}
	if got != sentN.Load() {
		return sentN.Load(), got, fmt.Errorf("server half-closed after echoing %d of %d bytes", got, sentN.Load())
	}
	if total > 0 && got != total {
		return sentN.Load(), got, fmt.Errorf("sent %d of %d bytes", got, total)
	}
	return sentN.Load(), got, nil
}

// logStream opens its connection before the barrier with GET /healthz
// and waits until the transport has put it back in its pool; it sends
// GET /logs only after the barrier, on that connection, and reads the
// answer at once. (Sending the request before the barrier left the
// kubelet's answer unread for tens of seconds: its TCP then backed off
// its zero-window probes up to 120 s, and one stream of 200 stalled.)
// Each stream has its own transport, so no stream takes another's
// pooled connection and every one of them is open at the barrier.
func (c *cbClient) logStream(ctx context.Context, seed uint64, ready <-chan struct{}, opened func(), setup func(time.Duration),
	duration, interval time.Duration, chunk int, total int64) (int64, error) {
	t0 := time.Now()
	tr := c.transport()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	// The transport keeps a connection only if it saw the request's write
	// finish within 50 ms of the response's end (net/http's
	// maxWriteWaitBeforeConnReuse); on a loaded machine it sometimes does
	// not, closes the connection and calls no PutIdleConn. Then open
	// another: a stream waits at most 5 s per try.
	var kept error
	for range 5 {
		pooled := make(chan error, 1)
		warm := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			PutIdleConn: func(err error) { pooled <- err },
		})
		if err := get(warm, hc, "https://"+c.target+"/healthz"); err != nil {
			return 0, err
		}
		select {
		case kept = <-pooled:
		case <-time.After(5 * time.Second):
			kept = errors.New("the transport closed it instead")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if kept == nil {
			break
		}
	}
	if kept != nil {
		return 0, fmt.Errorf("connection not kept for reuse after 5 tries: %w", kept)
	}
	setup(time.Since(t0))
	opened()
	<-ready

	var reused atomic.Bool
	run := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused.Store(info.Reused) },
	})
	u := fmt.Sprintf("https://%s/logs?seed=%d&chunk=%d&interval=%s&duration=%s&bytes=%d", c.target, seed, chunk, interval, duration, total)
	req, err := http.NewRequestWithContext(run, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /logs: %s", resp.Status)
	}
	if !reused.Load() {
		return 0, errors.New("GET /logs did not reuse a connection opened before the barrier")
	}
	rng := streamRNG(seed)
	buf := make([]byte, 64<<10)
	want := make([]byte, 64<<10)
	var got int64
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			rng.Read(want[:n])
			if !bytes.Equal(buf[:n], want[:n]) {
				return got, fmt.Errorf("log bytes differ at offset %d", got)
			}
			got += int64(n)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return got, fmt.Errorf("read after %d bytes: %w", got, err)
		}
	}
	if total > 0 {
		if got != total {
			return got, fmt.Errorf("stream ended after %d of %d bytes", got, total)
		}
		return got, nil
	}
	if min := int64(chunk) * int64(duration/interval) / 2; got < min {
		return got, fmt.Errorf("stream ended after %d bytes, want at least %d", got, min)
	}
	return got, nil
}
