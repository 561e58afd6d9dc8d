package verify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// The peer protocol lets the verify pods of one run (one Job, a pod or
// two per site) check each other and stay up until the others are done
// with them. It runs over UDP, one datagram per message, in text:
//
//	BHV1 hello NONCE          -> BHV1 seen NONCE SRC
//	BHV1 done NONCE           -> BHV1 ack NONCE
//
// seen names the source address the answering pod saw, so the asking
// pod learns whether its address survived the trip (no SNAT between
// sites, which NetworkPolicy by pod needs). done says "I have finished
// my checks"; a pod stays up, answering, until every peer has said it or
// its wait runs out. NONCE is 16 hex digits.
const (
	peerMagic = "BHV1"
	// DefaultPeerPort is the UDP port of the peer protocol.
	DefaultPeerPort = 4790
	nonceLen        = 16
	maxPeerMsg      = 128
)

// peerMsg is one decoded message of the peer protocol.
type peerMsg struct {
	verb  string // hello, seen, done, ack
	nonce string
	src   netip.Addr // seen only
}

// parsePeerMsg decodes a datagram; anything else is an error.
func parsePeerMsg(b []byte) (peerMsg, error) {
	if len(b) > maxPeerMsg {
		return peerMsg{}, fmt.Errorf("peer message of %d bytes: longer than %d", len(b), maxPeerMsg)
	}
	f := bytes.Fields(b)
	if len(f) < 3 || string(f[0]) != peerMagic {
		return peerMsg{}, errors.New("not a verify peer message")
	}
	m := peerMsg{verb: string(f[1]), nonce: string(f[2])}
	if len(m.nonce) != nonceLen {
		return peerMsg{}, fmt.Errorf("nonce %q: want %d hex digits", m.nonce, nonceLen)
	}
	if _, err := hex.DecodeString(m.nonce); err != nil {
		return peerMsg{}, fmt.Errorf("nonce %q: %w", m.nonce, err)
	}
	want := 3
	switch m.verb {
	case "hello", "done", "ack":
	case "seen":
		want = 4
		if len(f) == 4 {
			a, err := netip.ParseAddr(string(f[3]))
			if err != nil {
				return peerMsg{}, fmt.Errorf("seen: %w", err)
			}
			m.src = a.Unmap()
		}
	default:
		return peerMsg{}, fmt.Errorf("unknown verb %q", m.verb)
	}
	if len(f) != want {
		return peerMsg{}, fmt.Errorf("%s: %d fields, want %d", m.verb, len(f), want)
	}
	return m, nil
}

func (m peerMsg) append(b []byte) []byte {
	b = fmt.Appendf(b, "%s %s %s", peerMagic, m.verb, m.nonce)
	if m.verb == "seen" {
		b = fmt.Appendf(b, " %s", m.src)
	}
	return b
}

func newNonce() string {
	var b [nonceLen / 2]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// PeerSocket answers and asks the peer protocol on one UDP socket. Its
// reader goroutine (started by ListenPeers, ended by Close) answers
// hellos and dones and hands replies to the waiting caller by nonce.
// Hello and Finish may be called from any goroutine.
type PeerSocket struct {
	conn *net.UDPConn
	port uint16

	mu      sync.Mutex
	waiting map[string]chan peerMsg // by nonce; written by Hello/Finish, read by the reader
	doneBy  map[netip.Addr]bool     // peers that said done; written by the reader
	doneCh  chan struct{}           // signalled (non-blocking) when doneBy grows

	closed chan struct{}
}

// ListenPeers opens the peer socket on addr (port 0: any).
func ListenPeers(addr netip.AddrPort) (*PeerSocket, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("verify peers: %w", err)
	}
	p := &PeerSocket{conn: conn, port: uint16(conn.LocalAddr().(*net.UDPAddr).Port),
		waiting: map[string]chan peerMsg{}, doneBy: map[netip.Addr]bool{},
		doneCh: make(chan struct{}, 1), closed: make(chan struct{})}
	go p.read()
	return p, nil
}

// Port is the socket's UDP port.
func (p *PeerSocket) Port() uint16 { return p.port }

// Close stops the reader and closes the socket.
func (p *PeerSocket) Close() error {
	err := p.conn.Close()
	<-p.closed
	return err
}

func (p *PeerSocket) read() {
	defer close(p.closed)
	buf := make([]byte, 512)
	var out []byte
	for {
		n, from, err := p.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		m, err := parsePeerMsg(buf[:n])
		if err != nil {
			continue // not ours: drop
		}
		src := from.Addr().Unmap()
		switch m.verb {
		case "hello":
			out = peerMsg{verb: "seen", nonce: m.nonce, src: src}.append(out[:0])
			p.conn.WriteToUDPAddrPort(out, from) //nolint:errcheck // the asker retries
		case "done":
			p.mu.Lock()
			grew := !p.doneBy[src]
			p.doneBy[src] = true
			p.mu.Unlock()
			if grew {
				select {
				case p.doneCh <- struct{}{}:
				default:
				}
			}
			out = peerMsg{verb: "ack", nonce: m.nonce}.append(out[:0])
			p.conn.WriteToUDPAddrPort(out, from) //nolint:errcheck // the sender retries
		case "seen", "ack":
			p.mu.Lock()
			ch := p.waiting[m.nonce]
			p.mu.Unlock()
			if ch != nil {
				select {
				case ch <- m:
				default:
				}
			}
		}
	}
}

// ask sends m to dst every interval until its reply arrives or timeout.
func (p *PeerSocket) ask(ctx context.Context, dst netip.AddrPort, verb string, interval, timeout time.Duration) (peerMsg, time.Duration, error) {
	m := peerMsg{verb: verb, nonce: newNonce()}
	ch := make(chan peerMsg, 1)
	p.mu.Lock()
	p.waiting[m.nonce] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.waiting, m.nonce)
		p.mu.Unlock()
	}()
	out := m.append(nil)
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastErr error
	for {
		if _, err := p.conn.WriteToUDPAddrPort(out, dst); err != nil {
			lastErr = err
		}
		select {
		case r := <-ch:
			return r, time.Since(start), nil
		case <-tick.C:
		case <-deadline.C:
			if lastErr != nil {
				return peerMsg{}, 0, fmt.Errorf("no answer from %s in %s (last send: %w)", dst, timeout, lastErr)
			}
			return peerMsg{}, 0, fmt.Errorf("no answer from %s in %s", dst, timeout)
		case <-ctx.Done():
			return peerMsg{}, 0, ctx.Err()
		}
	}
}

// Hello asks the peer at dst which source address it sees for this
// socket, and the round trip.
func (p *PeerSocket) Hello(ctx context.Context, dst netip.AddrPort, timeout time.Duration) (netip.Addr, time.Duration, error) {
	r, rtt, err := p.ask(ctx, dst, "hello", timeout/4, timeout)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	return r.src, rtt, nil
}

// Finish tells every peer that this side is done, and waits until each
// peer has acknowledged that and said the same, so that no peer loses
// its partner in the middle of its checks. It gives up after wait and
// returns the peers that did not finish (by address).
func (p *PeerSocket) Finish(ctx context.Context, peers []netip.AddrPort, wait time.Duration) []netip.Addr {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	acked := make([]bool, len(peers))
	var wg sync.WaitGroup
	for i, dst := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := p.ask(ctx, dst, "done", 500*time.Millisecond, wait); err == nil {
				acked[i] = true
			}
		}()
	}
	for {
		p.mu.Lock()
		all := true
		for _, dst := range peers {
			all = all && p.doneBy[dst.Addr().Unmap()]
		}
		p.mu.Unlock()
		if all {
			break
		}
		select {
		case <-p.doneCh:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	var missing []netip.Addr
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, dst := range peers {
		if !acked[i] || !p.doneBy[dst.Addr().Unmap()] {
			missing = append(missing, dst.Addr())
		}
	}
	return missing
}
