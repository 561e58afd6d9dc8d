package transit

import (
	"fmt"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

var benchCiphers = []bhcrypto.CipherKind{bhcrypto.AESGCM, bhcrypto.ChaChaPoly}

// benchSizes are inner plaintext sizes; the relayed datagram is a
// transport message, TransportOverhead bytes larger.
var benchSizes = []int{64, 512, 1420}

// BenchmarkHubCrypto is the choice between the two framings, on the hub:
// the cryptography per relayed datagram, plus copying it into the work
// buffer (the same for both).
//
//   - once: the relay message (crypto.MsgRelay) is authenticated, not
//     encrypted: OpenRelay with the source's session, SealRelay with the
//     destination's.
//   - twice: the datagram and the destination KeyID are the plaintext of
//     an ordinary transport message of the spoke's session with the hub:
//     Open (decrypt) with the source's session, Seal (encrypt) with the
//     destination's.
//
// SetBytes is the relayed datagram, so MB/s is relayed throughput of one
// core.
func BenchmarkHubCrypto(b *testing.B) {
	for _, kind := range benchCiphers {
		for _, n := range benchSizes {
			w := newWorld(b, kind)
			fromE1 := w.hubSession(gwE1, gwHub)
			hubFromE1, _, _ := w.sess[gwHub].Current(gwE1)
			hubToE2, _, _ := w.sess[gwHub].Current(gwE2)
			inner := bhcrypto.TransportOverhead + n
			b.Run(fmt.Sprintf("once/%s/%d", kind, n), func(b *testing.B) {
				msg := w.wrap(b, gwE1, gwHub, gwE2, w.e2e[0], make([]byte, n))
				buf := make([]byte, len(msg))
				b.SetBytes(int64(inner))
				b.ReportAllocs()
				for b.Loop() {
					copy(buf, msg)
					in, _, _, err := hubFromE1.OpenRelay(buf)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := hubToE2.SealRelay(buf, len(in), w.plan.KeyID(gwE1)); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("twice/%s/%d", kind, n), func(b *testing.B) {
				plain := bhcrypto.PaddedLen(bhcrypto.KeyIDSize+inner, 1<<16)
				buf := make([]byte, bhcrypto.TransportOverhead+plain)
				msg, err := fromE1.Seal(buf, plain)
				if err != nil {
					b.Fatal(err)
				}
				msg = append([]byte(nil), msg...)
				b.SetBytes(int64(inner))
				b.ReportAllocs()
				for b.Loop() {
					copy(buf, msg)
					p, _, err := hubFromE1.Open(buf)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := hubToE2.Seal(buf, len(p)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkForward is the hub's whole forward path (Forward: parse,
// session lookup, authenticate, replay window, plan checks, reseal) with,
// in the same loop, the spoke's SealRelay that gives each datagram a new
// counter (the replay window would refuse a repeated one).
func BenchmarkForward(b *testing.B) {
	for _, kind := range benchCiphers {
		w := newWorld(b, kind)
		n := 1420
		b.Run(fmt.Sprintf("%s/%d", kind, n), func(b *testing.B) {
			msg := w.wrap(b, gwE1, gwHub, gwE2, w.e2e[0], make([]byte, n))
			buf := make([]byte, len(msg))
			fromE1 := w.hubSession(gwE1, gwHub)
			dst := w.plan.KeyID(gwE2)
			b.SetBytes(int64(len(msg) - bhcrypto.RelayOverhead))
			b.ReportAllocs()
			for b.Loop() {
				copy(buf, msg)
				if _, err := fromE1.SealRelay(buf, len(buf)-bhcrypto.RelayOverhead, dst); err != nil {
					b.Fatal(err)
				}
				if res := w.relay[gwHub].Forward(buf); res.Reason != Forwarded {
					b.Fatal(res.Reason)
				}
			}
		})
	}
}
