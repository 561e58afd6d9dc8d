package router

import (
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestOutsideBuffersHoldRelayMessages: transit.Bind reads a relay message
// (a full-size transport datagram plus RelayOverhead) into an outside
// buffer's capacity, so even without TUN offload (batch 1, where no GRO
// capacity is added) every buffer has room for it.
func TestOutsideBuffersHoldRelayMessages(t *testing.T) {
	for _, batch := range []int{1, 64} {
		r, err := New(Options{TUN: &nullTUN{batch: batch}, Bind: newCaptureBind("192.0.2.1:51820"), Identity: newIdentity(t, bhcrypto.AESGCM)})
		if err != nil {
			t.Fatal(err)
		}
		// The largest transport datagram of this MTU: header, the inner
		// packet padded to 16, the tag.
		largest := bhcrypto.TransportHeaderSize + (r.set.mtu+bhcrypto.PaddingMultiple-1)/bhcrypto.PaddingMultiple*bhcrypto.PaddingMultiple + bhcrypto.TagSize
		for i, b := range r.newOutsideBatch().bufs {
			if c := cap(b); c < largest+bhcrypto.RelayOverhead {
				t.Fatalf("TUN batch %d: outside buffer %d holds %d bytes, a relayed full-size datagram is %d", batch, i, c, largest+bhcrypto.RelayOverhead)
			}
		}
	}
}
