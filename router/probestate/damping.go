package probestate

import "time"

// Flap damping. A gateway goes down after the router's ProbeMisses
// silent probe intervals, which fails its flows over fast. Coming back up on the first
// answer made a lossy path (one that carries a probe now and then between
// spells of loss) move its flows to the site's other gateways and back
// about once a second, each move reordering or stalling them. So going
// down stays fast, and coming back up is damped, with hysteresis and a
// hold-down that grows with repeated flaps:
//
//   - A gateway that went down is up again only after RecoverProbes of
//     our probes in a row were answered. A probe unanswered for
//     the probe timeout (InFlight), or a control message saying it cannot
//     deliver, starts the count over. On a healthy path that takes about
//     RecoverProbes intervals plus the timeout of the last probe lost
//     before it healed: about a second at the default interval.
//   - Each down within a FlapDecay or so of the last doubles the count,
//     up to RecoverProbes << MaxFlapShift (48 answers: about ten seconds
//     at the default interval while we send it data, when it is probed
//     at the full pace). Counting answers rather than time keeps the
//     hold-down in step with the site's probe interval.
//   - The count of recent downs halves for every FlapDecay since the
//     last down, so a gateway that flapped an hour ago comes back after
//     RecoverProbes answers again.
//
// A gateway that went down because it said it is draining (a planned
// stop: DownDraining) needs RecoverProbes answers like any other, but
// the stop is not a flap: it neither doubles the count nor counts
// toward the next down's, so its replacement process is back after
// about RecoverProbes intervals however many rolling upgrades came
// before.
//
// A gateway that was never up (LiveConnecting) comes up on its first
// evidence, as before: there is nothing to damp.
const (
	// RecoverProbes is how many probes in a row a gateway that went down
	// once must answer to be up again.
	RecoverProbes = 3
	// MaxFlapShift bounds the doubling of RecoverProbes for repeated
	// downs.
	MaxFlapShift = 4
	// FlapDecay halves the count of recent downs of a gateway for every
	// FlapDecay since its last down.
	FlapDecay = time.Minute
)

// Damper is one gateway's flap damping (see above); the zero Damper has
// seen no down. It belongs to the router's handshake loop
// (liveness.evaluate): no lock.
type Damper struct {
	flaps    int    // recent downs as of lastDown, at most MaxFlapShift+1
	lastDown int64  // mono ns of the last down; 0: never
	base     uint64 // answered probes (the router's liveness.probeReplies) when the streak started
}

// Down notes that the gateway went down at mono, having answered replies
// probes so far.
func (d *Damper) Down(mono int64, replies uint64) {
	d.flaps = min(d.recent(mono)+1, MaxFlapShift+1)
	d.lastDown = mono
	d.base = replies
}

// Drained notes that the gateway went down because it is draining,
// having answered replies probes so far: the streak starts over, and
// the recent downs stay as they were.
func (d *Damper) Drained(replies uint64) { d.base = replies }

// recent is the count of recent downs at mono, decayed.
func (d *Damper) recent(mono int64) int {
	if d.lastDown == 0 {
		return 0
	}
	halvings := (mono - d.lastDown) / int64(FlapDecay)
	if halvings >= 16 {
		return 0
	}
	return d.flaps >> halvings
}

// Restart starts the streak of answers over at replies: a probe went
// unanswered, or the gateway cannot deliver.
func (d *Damper) Restart(replies uint64) { d.base = replies }

// Need is how many answers in a row bring the gateway back up.
func (d *Damper) Need() uint64 {
	return RecoverProbes << min(max(d.flaps-1, 0), MaxFlapShift)
}

// Recovered reports whether the gateway answered enough probes in a row,
// replies in all, to be up again.
func (d *Damper) Recovered(replies uint64) bool { return replies-d.base >= d.Need() }

// Base is the count of answered probes at which the current streak
// started.
func (d *Damper) Base() uint64 { return d.base }

// Flaps is the count of recent downs as of the last one, before decay.
func (d *Damper) Flaps() int { return d.flaps }
