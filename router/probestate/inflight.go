package probestate

import "sync/atomic"

// Probes in flight. A probe reply proves that our packets reach the
// gateway only if it answers a probe of ours that is still in flight:
// sent, not answered yet, and sent at most the probe timeout ago. Anything
// else, a reply held back in a queue and delivered after the path died,
// a second answer to one probe, an answer to a probe never sent, would
// mark a dead path alive. The replay window does not catch these: each
// is a new message of the session, only a stale one.
//
// The wire format is unchanged: the echo (the router's probe.go) was
// always copied into the reply, and it is the probe's send time, unique
// per gateway (MTUEcho sets a path MTU probe's apart), so it names the
// probe. Gateways of any version answer with it; a reply echoing 0
// answers nothing. The probe timeout is the router's (probeTimeout: a few
// round trips, bounded by its probe interval and ProbeMisses).

// InFlightSlots is how many probes to one gateway can be in flight. A
// gateway gets a small probe at most once per interval (and one now and
// then on a new session or a change of what we can deliver) and one path
// MTU probe at a time, so at most about five are younger than the probe
// timeout; an older one whose slot is taken is forgotten, as if it had
// expired.
const InFlightSlots = 8

// InFlight is one gateway's probes in flight, by echo (0: a free slot);
// the zero InFlight is empty. Sent fills a slot (the router's handshake
// loop, prober.run); Answer (outside loop) and Expire (handshake loop)
// empty it, each by CompareAndSwap, so that a probe is answered or
// expired once. next is the handshake loop's.
type InFlight struct {
	echo [InFlightSlots]atomic.Uint64
	next int
}

// SentAt is the send time, in mono ns, that echo carries.
func SentAt(echo uint64) int64 { return int64(echo &^ MTUEcho) }

// Sent records a probe with echo as in flight. Handshake loop only.
func (f *InFlight) Sent(echo uint64) {
	f.echo[f.next].Store(echo)
	f.next = (f.next + 1) % InFlightSlots
}

// Answer reports whether echo answers a probe in flight at now and, if
// so, takes it out: a probe is answered once. Any goroutine; it
// allocates nothing.
func (f *InFlight) Answer(echo uint64, now, timeout int64) bool {
	if echo == 0 || now-SentAt(echo) > timeout {
		return false
	}
	for i := range f.echo {
		if f.echo[i].Load() == echo {
			return f.echo[i].CompareAndSwap(echo, 0)
		}
	}
	return false
}

// Expire takes out the probes older than timeout at now and returns how
// many of them were small probes (the router's liveness counts them; an MTU probe may be lost
// for its size alone). Handshake loop only.
func (f *InFlight) Expire(now, timeout int64) (missed int) {
	for i := range f.echo {
		e := f.echo[i].Load()
		if e != 0 && now-SentAt(e) > timeout && f.echo[i].CompareAndSwap(e, 0) && e&MTUEcho == 0 {
			missed++
		}
	}
	return missed
}
