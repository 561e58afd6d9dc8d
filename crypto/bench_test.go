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
