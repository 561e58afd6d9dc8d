package router

// rxTally adds up one outside batch's authenticated packets and delivered
// bytes for the peer they came from, and adds them to the peer's counters
// when the peer changes and when the batch ends. Lanes opening one peer's
// datagrams then write its shared counters once per run of its packets
// instead of twice per packet, which made the two lanes of
// BenchmarkLanes pass the peer's cache line back and forth (a tenth of
// their time went to loading the endpoint pointer beside the counters).
// Owned by the batch's goroutine; only flush touches shared memory.
type rxTally struct {
	p              *Peer
	packets, bytes uint64
}

// packet counts one authenticated message from p.
func (t *rxTally) packet(p *Peer) {
	if p != t.p {
		t.flush()
		t.p = p
	}
	t.packets++
}

// delivered counts n inner bytes of the last packet's peer delivered.
func (t *rxTally) delivered(n int) { t.bytes += uint64(n) }

// flush adds what was counted to the peer's counters.
func (t *rxTally) flush() {
	if t.p == nil {
		return
	}
	t.p.rxPackets.Add(t.packets)
	if t.bytes > 0 {
		t.p.rxBytes.Add(t.bytes)
	}
	*t = rxTally{}
}
