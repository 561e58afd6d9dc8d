package crypto

import (
	"bytes"
	"crypto/cipher"
	"fmt"
	"testing"
)

var benchSizes = []int{64, 512, 1420, 8192}

func BenchmarkSeal(b *testing.B) {
	for _, kind := range ciphers {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", kind, n), func(b *testing.B) {
				a, _ := testKeypairs(b, kind)
				buf := make([]byte, TransportOverhead+n)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := a.Seal(buf, n); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkOpen includes copying the packet into the work buffer each
// iteration, since Open decrypts in place.
func BenchmarkOpen(b *testing.B) {
	for _, kind := range ciphers {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", kind, n), func(b *testing.B) {
				a, r := testKeypairs(b, kind)
				wire := seal(b, a, bytes.Repeat([]byte{0x5a}, n))
				buf := make([]byte, len(wire))
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					copy(buf, wire)
					if _, _, err := r.Open(buf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkBareAEADSeal is a plain cipher.AEAD Seal of the same bytes, the
// floor Keypair.Seal is measured against.
func BenchmarkBareAEADSeal(b *testing.B) {
	for _, kind := range ciphers {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", kind, n), func(b *testing.B) {
				var key [KeySize]byte
				aead, err := newAEAD(kind, &key)
				if err != nil {
					b.Fatal(err)
				}
				benchBareSeal(b, aead, n)
			})
		}
	}
}

func benchBareSeal(b *testing.B, aead cipher.AEAD, n int) {
	buf := make([]byte, TransportOverhead+n)
	body := buf[TransportHeaderSize : TransportHeaderSize+n]
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		aead.Seal(body[:0], buf[4:TransportHeaderSize], body, buf[:TransportHeaderSize])
	}
}

func BenchmarkReplayCheck(b *testing.B) {
	b.Run("in-order", func(b *testing.B) {
		_, r := testKeypairs(b, AESGCM)
		b.ReportAllocs()
		var c uint64
		for b.Loop() {
			r.CheckReplay(c)
			c++
		}
	})
	b.Run("reordered", func(b *testing.B) {
		var w ReplayWindow
		b.ReportAllocs()
		var c uint64
		for b.Loop() {
			w.Check(c ^ 7) // permutes each group of 8
			c++
		}
	})
}

func BenchmarkHandshake(b *testing.B) {
	x := testIdentity(b, 1, ChaChaPoly, Prologue("bench"))
	y := testIdentity(b, 2, ChaChaPoly, Prologue("bench"))
	b.ReportAllocs()
	for b.Loop() {
		handshake(b, x, y)
	}
}

// BenchmarkSealParallel seals 1420-byte packets from every P (run with
// -cpu 1,2), each P with its own buffer: "shared" all on one keypair, as
// lanes carrying one session do, so they share its send counter's cache
// line once per packet; "shared-reserve" the same keypair with counters
// taken 64 at a time (ReserveCounters, as the router's batch sealer does);
// "own" each P on a keypair of its own, the floor without any sharing.
func BenchmarkSealParallel(b *testing.B) {
	const n = 1420
	for _, mode := range []string{"shared", "shared-reserve", "own"} {
		b.Run(mode, func(b *testing.B) {
			shared, _ := testKeypairs(b, AESGCM)
			b.SetBytes(n)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				kp := shared
				if mode == "own" {
					kp, _ = testKeypairs(b, AESGCM)
				}
				buf := make([]byte, TransportOverhead+n)
				var next, end uint64
				for pb.Next() {
					var err error
					if mode != "shared-reserve" {
						_, err = kp.SealLane(buf, n, 1)
					} else {
						if next == end {
							first, got := kp.ReserveCounters(64)
							next, end = first, first+uint64(got)
						}
						_, err = kp.SealLaneAt(buf, n, 1, next)
						next++
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
