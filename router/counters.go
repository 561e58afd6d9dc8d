package router

import bhcrypto "github.com/bridgehead/bridgehead/crypto"

// counterBlock is the send counters one sealing pass has reserved on one
// keypair (crypto.Keypair.ReserveCounters): lanes that seal the same
// session then meet on its counter once per run of packets to it instead
// of once per packet. It lives on the stack of one route call and is
// used by that goroutine only, so it needs no lock; counters it reserved
// and did not use are gaps when the call returns, never used later, so a
// lane that sleeps cannot send counters from before another lane's
// thousands of packets (which the receiver would drop as too old).
type counterBlock struct {
	kp        *bhcrypto.Keypair
	next, end uint64
}

// take returns the next counter for kp, reserving up to want more when
// the block is empty or for another keypair. ok is false when kp has no
// counter left (RejectAfterMessages).
func (c *counterBlock) take(kp *bhcrypto.Keypair, want int) (counter uint64, ok bool) {
	if c.kp != kp || c.next == c.end {
		first, got := kp.ReserveCounters(min(want, maxCounterBlock))
		if got == 0 {
			c.kp = nil
			return 0, false
		}
		c.kp, c.next, c.end = kp, first, first+uint64(got)
	}
	counter = c.next
	c.next++
	return counter, true
}

// maxCounterBlock bounds one reservation: a read batch of the offload
// TUN holds up to 128 packets; 64 keeps the counters a lane skips when a
// batch mixes peers small.
const maxCounterBlock = 64
