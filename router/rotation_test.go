package router

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
)

// peerIndices returns the sessions of p in the index table.
func peerIndices(r *Router, p *Peer) map[*bhcrypto.Keypair]bool {
	out := map[*bhcrypto.Keypair]bool{}
	if s := r.index.tab.Load(); s != nil {
		for i := range s.slots {
			e := s.slots[i].Load()
			if e == nil || e == indexTombstone || e.peer != p {
				continue
			}
			if e.kp.LocalIndex != e.idx {
				panic("index entry under the wrong index")
			}
			out[e.kp] = true
		}
	}
	return out
}

// TestRotationConcurrent: the handshake loop completing a handshake and
// wiping old sessions, while the outside loop confirms a session we
// answered, never loses either of the two sessions just established.
// Whatever order they run in, current and previous end as exactly those
// two, both in the index table, and the old ones are retired. Run with
// -race.
func TestRotationConcurrent(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	r := h.a
	p := r.state.Load().order[0]
	now := h.now
	aged := now.Add(-wipeAfter - time.Second)
	var idx uint32 = 1 << 20
	mk := func(created time.Time) *bhcrypto.Keypair {
		idx++
		return &bhcrypto.Keypair{LocalIndex: idx, Created: created}
	}
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	for round := range rounds {
		// current and previous are old enough to be wiped; next is a
		// session we answered, about to be confirmed.
		c0, p0, kpR, kpI := mk(aged), mk(aged), mk(now), mk(now)
		p.keypairs.mu.Lock()
		p.current.Store(c0)
		p.previous.Store(p0)
		p.next.Store(kpR)
		p.keypairs.mu.Unlock()
		r.index.reset()
		for _, kp := range []*bhcrypto.Keypair{c0, p0, kpR} {
			r.index.add(p, kp)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // the handshake loop
			defer wg.Done()
			<-start
			if round%2 == 0 {
				r.hs.expireSessions(p, now)
				r.hs.establish(p, kpI)
			} else {
				r.hs.establish(p, kpI)
				r.hs.expireSessions(p, now)
			}
		}()
		go func() { // the outside loop
			defer wg.Done()
			<-start
			r.confirm(p, kpR, now)
		}()
		close(start)
		wg.Wait()
		cur, prev, next := p.current.Load(), p.previous.Load(), p.next.Load()
		held := map[*bhcrypto.Keypair]bool{cur: true, prev: true}
		if !held[kpI] || !held[kpR] || next != nil {
			t.Fatalf("round %d: current %p previous %p next %p; want the established %p and the confirmed %p (old: %p %p)",
				round, cur, prev, next, kpI, kpR, c0, p0)
		}
		if got := peerIndices(r, p); len(got) != 2 || !got[kpI] || !got[kpR] {
			t.Fatalf("round %d: index table holds %v, want exactly %p and %p", round, got, kpI, kpR)
		}
	}
}

// TestRemovedPeerGetsNoSession: a handshake response that arrives after a
// reload removed the peer (its key revoked) installs nothing: packets
// under that session are dropped right away, and neither the index table
// nor the kernel filter holds an index for the peer.
func TestRemovedPeerGetsNoSession(t *testing.T) {
	clock := newFakeClock()
	now := clock.Now()
	idA, idB := newIdentity(t, bhcrypto.AESGCM), newIdentity(t, bhcrypto.AESGCM)
	bindA := newCaptureBind("192.0.2.1:51820")
	epB := netip.MustParseAddrPort("192.0.2.2:51820")
	tunA := &nullTUN{batch: 64}
	f := newRecordingFilter()
	r, err := New(Options{TUN: tunA, Bind: bindA, Identity: idA, Clock: clock, Filter: f, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
	cfg := twoSiteConfig("site-a", idA.Public, idB.Public, bindA.local, epB)
	if err := r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	p := r.state.Load().peers[idB.Public]

	// The handshake loop sends an initiation; B answers it.
	r.hs.initiate(p, now, false)
	ri, err := idB.ConsumeInitiation(append([]byte(nil), bindA.last[:bindA.n]...))
	if err != nil {
		t.Fatal(err)
	}
	kpB, resp, err := idB.CreateResponse(ri, 77, now)
	if err != nil {
		t.Fatal(err)
	}

	// B's key is revoked while its response is on the way.
	revoked := twoSiteConfig("site-a", idA.Public, idB.Public, bindA.local, epB)
	revoked.Sites[1].Gateways = nil
	if err := r.SetConfig(revoked); err != nil {
		t.Fatal(err)
	}
	r.hs.handle(resp, epB, now, make([]byte, r.set.bufSize))

	if kp := p.current.Load(); kp != nil {
		t.Errorf("removed peer has a current session")
	}
	if got := peerIndices(r, p); len(got) != 0 {
		t.Errorf("index table holds %d sessions of the removed peer", len(got))
	}
	if ids, _, _, _, _ := f.snapshot(); len(ids) != 0 {
		t.Errorf("kernel filter holds indices %v", ids)
	}

	// B sends under the revoked key: dropped, counted.
	pkt := udpPacket(t, podB, podA, []byte("revoked"))
	buf := make([]byte, r.set.bufSize)
	copy(buf[bufHeadroom:], pkt)
	msg, err := kpB.Seal(buf, bhcrypto.PaddedLen(len(pkt), r.set.mtu))
	if err != nil {
		t.Fatal(err)
	}
	out := r.newOutsideBatch()
	out.sizes[0] = copy(out.bufs[0], msg)
	out.eps[0] = epB
	before := r.drops.Get(Outside, ReasonUnknownIndex)
	r.receiveBatch(out, 1, now)
	if tunA.written != 0 {
		t.Fatalf("a packet under the revoked key reached the TUN")
	}
	if r.drops.Get(Outside, ReasonUnknownIndex) != before+1 {
		t.Fatalf("packet under the revoked key not counted as unknown_index; drops %+v", r.drops.snapshot())
	}
}

// TestKeypairsClosed: once a peer is removed, neither a completed
// handshake nor an answered one installs a session, whatever state the
// caller loaded before the removal.
func TestKeypairsClosed(t *testing.T) {
	var k keypairs
	old := &bhcrypto.Keypair{LocalIndex: 1}
	k.establish(old)
	if gone := k.close(); gone[0] != old {
		t.Fatalf("close returned %v", gone)
	}
	for name, f := range map[string]func(*bhcrypto.Keypair) (*bhcrypto.Keypair, bool){
		"establish": k.establish, "answer": k.answer,
	} {
		if _, ok := f(&bhcrypto.Keypair{LocalIndex: 2}); ok {
			t.Errorf("%s installed a session after close", name)
		}
	}
	if k.current.Load() != nil || k.previous.Load() != nil || k.next.Load() != nil {
		t.Fatal("sessions after close")
	}
}

// forget drops current and previous (the peer's sessions are lost, as
// after a restart) without closing. Tests only. It returns what it dropped.
func (k *keypairs) forget() (gone [2]*bhcrypto.Keypair) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return [2]*bhcrypto.Keypair{k.current.Swap(nil), k.previous.Swap(nil)}
}

var _ tun.Device = (*nullTUN)(nil)
