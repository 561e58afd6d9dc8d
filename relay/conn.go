package relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// maxHeaderBytes bounds the CONNECT request with its headers.
const maxHeaderBytes = 16 << 10

// conn is one client connection past the policy check. Its fields are
// set before it is registered and read-only after, except those noted.
type conn struct {
	r      *Relay
	client net.Conn   // *tls.Conn with TLS
	src    netip.Addr // the client's address (allowedClients)
	dst    netip.AddrPort
	site   string

	upMu     sync.Mutex // guards upstream, set once the dial succeeds
	upstream net.Conn
	cancel   context.CancelFunc // cancels the dial

	reason     atomic.Pointer[string] // first close reason wins
	lastActive atomic.Int64           // the last byte either way: nanoseconds since r.epoch
	toDest     atomic.Int64
	toClient   atomic.Int64
}

// touch records a byte relayed now.
func (c *conn) touch() { c.lastActive.Store(int64(c.r.now().Sub(c.r.epoch))) }

// quiet is the time since the last byte either way, on the monotonic
// clock (UnixNano has no monotonic reading: a wall-clock step would make
// a busy connection look idle).
func (c *conn) quiet() time.Duration {
	return c.r.now().Sub(c.r.epoch) - time.Duration(c.lastActive.Load())
}

// shut closes both sides of the connection with reason, unless another
// reason was recorded first.
func (c *conn) shut(reason string) {
	c.reason.CompareAndSwap(nil, &reason)
	c.cancel()
	c.client.Close()
	c.upMu.Lock()
	if c.upstream != nil {
		c.upstream.Close()
	}
	c.upMu.Unlock()
}

// handle runs one client from its first byte to the access log line.
func (r *Relay) handle(nc net.Conn, cfg *Config, key netip.Prefix) {
	start := time.Now()
	client := nc.RemoteAddr().String()
	inHeader := true
	defer func() {
		if inHeader {
			r.mu.Lock()
			r.endPending(key)
			r.mu.Unlock()
		}
	}()
	nc.SetDeadline(start.Add(cfg.HeaderTimeout))
	cc := nc
	if cfg.TLS != nil {
		tc := tls.Server(nc, cfg.TLS)
		if err := tc.Handshake(); err != nil {
			reason := ReasonTLS
			var idErr *identityError
			switch {
			case isTimeout(err):
				reason = ReasonHeaderTimeout
			case errors.As(err, &idErr):
				reason = ReasonClientIdentity
			}
			r.refuse(reason)
			r.accessLog(client, "", "", reason, err.Error(), 0, 0, time.Since(start), "")
			nc.Close()
			return
		}
		cc = tc
	}
	br := bufio.NewReaderSize(&io.LimitedReader{R: cc, N: maxHeaderBytes}, 4096)
	req, err := http.ReadRequest(br)
	if err != nil {
		reason, why := ReasonBadRequest, "malformed request: "+err.Error()
		if isTimeout(err) {
			reason, why = ReasonHeaderTimeout, fmt.Sprintf("no complete request within %s", cfg.HeaderTimeout)
		}
		r.reject(cc, client, "", reason, why, start)
		return
	}
	if req.Method != http.MethodConnect {
		r.reject(cc, client, req.RequestURI, ReasonMethod, req.Method+" is not CONNECT; this relay only tunnels", start)
		return
	}
	dst, err := netip.ParseAddrPort(req.RequestURI)
	if err != nil || dst.Addr().Zone() != "" {
		if host, port, serr := net.SplitHostPort(req.RequestURI); serr == nil && host != "" && port != "" {
			r.reject(cc, client, req.RequestURI, ReasonHostname, fmt.Sprintf("%q is a host name; CONNECT needs an IP address", host), start)
			return
		}
		r.reject(cc, client, req.RequestURI, ReasonBadRequest, fmt.Sprintf("%q is not IP:port", req.RequestURI), start)
		return
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	// The policy in force now, not at accept: a reload may have come.
	cfg = r.cfg.Load()
	v := cfg.decide(dst)
	if v.reason != ReasonNone {
		r.reject(cc, client, dst.String(), v.reason, v.why, start)
		return
	}
	c := &conn{r: r, client: cc, src: remoteAddr(nc), dst: dst, site: v.site}
	ctx, cancel := context.WithTimeout(r.ctx, dialTimeout(cfg))
	c.cancel = cancel
	defer cancel()
	if r.beforeRegister != nil {
		r.beforeRegister()
	}
	// Register under the limits (the header phase ends here). The policy
	// is decided again under mu: SetConfig stores a new one before it
	// scans the registered connections under mu, so a connection is
	// either seen by that scan or decided here under the new policy.
	r.mu.Lock()
	cfg = r.cfg.Load()
	v = cfg.decide(dst)
	if v.reason == ReasonNone && !cfg.clientAllowed(c.src) {
		v.reason, v.why = ReasonClientNotAllowed, "no longer in allowedClients"
	}
	if v.reason != ReasonNone {
		r.mu.Unlock()
		r.reject(cc, client, dst.String(), v.reason, v.why, start)
		return
	}
	c.site = v.site
	switch {
	case r.closed:
		r.mu.Unlock()
		cc.Close()
		return
	case len(r.conns) >= cfg.MaxConnections:
		r.mu.Unlock()
		r.reject(cc, client, dst.String(), ReasonLimit, fmt.Sprintf("%d relayed connections (maxConnections)", cfg.MaxConnections), start)
		return
	case r.perDest[dst] >= cfg.MaxConnectionsPerDestination:
		r.mu.Unlock()
		r.reject(cc, client, dst.String(), ReasonDestinationLimit,
			fmt.Sprintf("%d relayed connections to %s (maxConnectionsPerDestination)", cfg.MaxConnectionsPerDestination, dst), start)
		return
	}
	r.endPending(key)
	inHeader = false
	r.conns[c] = struct{}{}
	r.perDest[dst]++
	r.mu.Unlock()
	defer r.unregister(c)

	dialStart := time.Now()
	src := cfg.Source
	if dst.Addr().Is6() {
		src = cfg.Source6
	}
	up, err := r.dial(ctx, src, dst)
	r.m.dial.Observe(time.Since(dialStart).Seconds())
	if err != nil {
		if p := c.reason.Load(); p != nil { // revoked or shut down while dialing
			cc.Close()
			r.accessLog(client, dst.String(), v.site, ReasonNone, "closed while dialing", 0, 0, time.Since(start), *p)
			return
		}
		reason := ReasonDialFailed
		if isTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
			reason = ReasonDialTimeout
		}
		r.reject(cc, client, dst.String(), reason, "dial "+dst.String()+": "+err.Error(), start)
		return
	}
	c.upMu.Lock()
	c.upstream = up
	c.upMu.Unlock()
	if p := c.reason.Load(); p != nil {
		c.shut(*p) // revoked during the dial: close what it opened
	}
	cc.SetDeadline(time.Time{})
	if _, err := io.WriteString(cc, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.shut(CloseError)
		r.finish(c, client, start)
		return
	}
	r.m.total.Inc()
	r.m.active.Inc()
	r.mu.Lock()
	r.total++
	r.mu.Unlock()
	defer r.m.active.Dec()
	c.touch()

	// Bytes the client sent behind its request go first.
	var early []byte
	if n := br.Buffered(); n > 0 {
		early, _ = br.Peek(n)
	}
	idle := cfg.IdleTimeout
	done := make(chan error, 1)
	go func() { done <- c.pipe(up, cc, early, &c.toDest, r.m.toDest, idle) }()
	err1 := c.pipe(cc, up, nil, &c.toClient, r.m.toClient, idle)
	if err1 != nil {
		c.shut(closeReasonOf(err1))
	}
	err2 := <-done
	if err2 != nil {
		c.shut(closeReasonOf(err2))
	}
	c.shut(CloseDone)
	r.finish(c, client, start)
}

func dialTimeout(c *Config) time.Duration {
	if c.DialTimeout > 0 {
		return c.DialTimeout
	}
	return DefaultDialTimeout
}

// errIdle ends a pipe whose connection was quiet for the idle timeout.
var errIdle = errors.New("idle")

func closeReasonOf(err error) string {
	if errors.Is(err, errIdle) {
		return CloseIdle
	}
	return CloseError
}

// finish writes the access log line of a relayed connection.
func (r *Relay) finish(c *conn, client string, start time.Time) {
	reason := CloseDone
	if p := c.reason.Load(); p != nil {
		reason = *p
	}
	r.m.closed.WithLabelValues(reason).Inc()
	r.accessLog(client, c.dst.String(), c.site, ReasonNone, "", c.toDest.Load(), c.toClient.Load(), time.Since(start), reason)
}

func (r *Relay) unregister(c *conn) {
	r.mu.Lock()
	delete(r.conns, c)
	if r.perDest[c.dst]--; r.perDest[c.dst] <= 0 {
		delete(r.perDest, c.dst)
	}
	r.mu.Unlock()
}

// reject answers a refusal, counts it, logs it and closes the client.
func (r *Relay) reject(cc net.Conn, client, dst string, reason Reason, why string, start time.Time) {
	r.refuse(reason)
	r.accessLog(client, dst, "", reason, why, 0, 0, time.Since(start), "")
	if reason.status() != 0 {
		cc.SetWriteDeadline(time.Now().Add(time.Second))
		writeStatus(cc, reason, "relay: "+why+"\n")
		closeWrite(cc)
		// Let the response reach the client before the close: read
		// briefly what it may still send, so the close is not a reset.
		cc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		io.Copy(io.Discard, io.LimitReader(cc, 64<<10))
	}
	cc.Close()
}

// accessLog writes the one line of a connection: relayed (reason none,
// with bytes and close reason) or refused (with the refusal reason).
func (r *Relay) accessLog(client, dst, site string, refused Reason, why string, toDest, toClient int64, d time.Duration, closed string) {
	if refused != ReasonNone {
		r.log.Info("relay connection refused", "client", client, "destination", dst,
			"status", refused.status(), "reason", string(refused), "detail", why, "duration", d.Round(time.Microsecond))
		return
	}
	attrs := []any{"client", client, "destination", dst, "site", site, "status", http.StatusOK,
		"bytes_to_destination", toDest, "bytes_to_client", toClient, "duration", d.Round(time.Microsecond), "close", closed}
	if why != "" {
		attrs = append(attrs, "detail", why)
	}
	r.log.Info("relay connection", attrs...)
}

func writeStatus(w io.Writer, reason Reason, body string) {
	code := reason.status()
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

// closeWrite half-closes c: close_notify and then the TCP FIN under TLS.
func closeWrite(c net.Conn) error {
	var err error
	if tc, ok := c.(*tls.Conn); ok {
		err = tc.CloseWrite()
		c = tc.NetConn()
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		err = errors.Join(err, cw.CloseWrite())
	}
	return err
}

// bufPool holds the copy buffers. A pipe from a TCP connection takes one
// only once bytes are waiting, so an idle plain-TCP relayed connection
// holds none; a TLS client's pipe holds one while it waits (crypto/tls
// reads into the caller's buffer).
var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// pipe copies src to dst until src ends, then half-closes dst. It
// returns nil at a clean end, errIdle after idle with no bytes either
// way or a write that dst did not take within idle, or the read or
// write error.
//
// Writes have deadlines: a peer that stopped reading (a destination
// that half-closed and went away, a client that stopped) would
// otherwise block the write forever, since TCP's zero-window probes keep
// the connection alive. The deadline does not look at the other
// direction: a write that does not go through within idleTimeout (10
// minutes by default) ends the connection even while the other side is
// busy, because a timed-out write leaves a TLS connection unusable.
func (c *conn) pipe(dst, src net.Conn, early []byte, n *atomic.Int64, m prometheus.Counter, idle time.Duration) error {
	if len(early) > 0 {
		if err := writeIdle(dst, early, idle); err != nil {
			return err
		}
		n.Add(int64(len(early)))
		m.Add(float64(len(early)))
	}
	for {
		src.SetReadDeadline(time.Now().Add(idle))
		if err := waitReadable(src); err != nil {
			if isTimeout(err) {
				if c.quiet() < idle {
					continue // the other direction is busy
				}
				return errIdle
			}
			return err
		}
		bp := bufPool.Get().(*[]byte)
		k, rerr := src.Read(*bp)
		if k > 0 {
			c.touch()
			if werr := writeIdle(dst, (*bp)[:k], idle); werr != nil {
				bufPool.Put(bp)
				return werr
			}
			n.Add(int64(k))
			m.Add(float64(k))
		}
		bufPool.Put(bp)
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF):
			dst.SetWriteDeadline(time.Now().Add(idle)) // close_notify under TLS is a write
			closeWrite(dst)
			return nil
		case isTimeout(rerr):
			if c.quiet() < idle {
				continue
			}
			return errIdle
		default:
			return rerr
		}
	}
}

// writeIdle writes b to dst within idle, or returns errIdle (wrapped).
func writeIdle(dst net.Conn, b []byte, idle time.Duration) error {
	dst.SetWriteDeadline(time.Now().Add(idle))
	if _, err := dst.Write(b); err != nil {
		if isTimeout(err) {
			return fmt.Errorf("%w: write not taken within %s", errIdle, idle)
		}
		return err
	}
	return nil
}

// waitReadable blocks until a plain TCP connection has bytes (or EOF,
// or an error) to read, without holding a buffer meanwhile; it honors
// the read deadline. Other connections (TLS) return at once: their
// Read blocks with the library's own buffer.
func waitReadable(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var one [1]byte
	return rc.Read(func(fd uintptr) bool {
		_, _, errno := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return errno != syscall.EAGAIN
	})
}
