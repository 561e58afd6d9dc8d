package crypto

// Replay window geometry (RFC 6479 style): a ring of ringWords 64-bit
// words. The word holding the newest counter is partly in the future, so
// one word of the ring is not usable as history.
const (
	replayWordBits  = 64
	replayRingWords = 256 // power of two
	replayRingBits  = replayRingWords * replayWordBits

	// ReplayWindowSize is how many counters the window tracks: with
	// newest accepted counter top, counters top-ReplayWindowSize+1 ..
	// top are checked individually and anything older is rejected.
	ReplayWindowSize = replayRingBits - replayWordBits // 16320
)

// ReplayWindow rejects duplicate and too-old message counters.
//
// It is a plain value (about 2 KiB) with no internal locking: it is not
// safe for concurrent use. Keypair guards its window with a mutex. The zero
// value is an empty window that accepts counter 0.
type ReplayWindow struct {
	top  uint64 // highest counter accepted so far (0 when none)
	ring [replayRingWords]uint64
}

// Check records counter and reports whether it is new: not seen before,
// not older than the window and below RejectAfterMessages. A counter far
// ahead of the window moves the window, clearing at most the whole ring.
// Check does no allocation.
func (w *ReplayWindow) Check(counter uint64) bool {
	if counter >= RejectAfterMessages {
		return false
	}
	block := counter / replayWordBits
	if counter > w.top {
		cur := w.top / replayWordBits
		diff := block - cur
		if diff >= replayRingWords {
			clear(w.ring[:])
		} else {
			for i := cur + 1; i <= block; i++ {
				w.ring[i%replayRingWords] = 0
			}
		}
		w.top = counter
	} else if w.top-counter >= ReplayWindowSize {
		return false
	}
	idx := block % replayRingWords
	bit := uint64(1) << (counter % replayWordBits)
	if w.ring[idx]&bit != 0 {
		return false
	}
	w.ring[idx] |= bit
	return true
}

// Reset empties the window.
func (w *ReplayWindow) Reset() {
	*w = ReplayWindow{}
}
