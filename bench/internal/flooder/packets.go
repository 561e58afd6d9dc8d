// Package flooder is the flood worker of the benchmark's flood
// measurement (bhbench -flood): it sends a gateway's UDP port garbage or
// handshake initiations with bad MACs at a paced rate, in sendmmsg
// batches, and reports what the kernel took from it. The harness runs it
// as `bhbench flood-worker` in a namespace of its own.
//
// It does not import the packages it attacks: the few wire-format sizes
// it needs are repeated here, and the tests check them against crypto.
package flooder

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Flood kinds as `bhbench flood-worker -kind` takes them.
const (
	// Garbage is datagrams no gateway should accept: random bytes,
	// runts, and transport-looking messages for sessions that do not
	// exist.
	Garbage = "garbage"
	// BadMAC is well-formed handshake initiations (type 1, 148
	// bytes) whose mac1 is random, so wrong.
	BadMAC = "badmac"
)

// Sizes of the wire format (crypto/doc.go), repeated here so that the
// flooder does not depend on the package it attacks.
const (
	initiationSize = 148 // type 1 reserved 3 sender 4 noise 108 mac1 16 mac2 16
	mac1Off        = 116
	mac2Off        = 132
	transportMin   = 32 // header 16 + tag 16
	maxSize        = 1400
)

// Garbage is a mix, in eighths of the datagrams: 4/8 random bytes of a
// random size in 1..1400 (any first byte), 1/8 runts of 1..3 bytes, 3/8
// transport-looking messages (type 4, reserved zero, random receiver index
// and counter, random body) of 32..1400 bytes.
const (
	garbageRandomEighths    = 4
	garbageRuntEighths      = 1
	garbageTransportEighths = 3
)

// GarbagePacket returns the i-th datagram of a garbage flood, its content
// drawn from rng. Which of the three shapes it has depends on i only, so
// the mix is exact over every 8 consecutive packets.
func GarbagePacket(rng *rand.Rand, i int) []byte {
	switch k := i % 8; {
	case k < garbageRandomEighths:
		b := make([]byte, 1+rng.IntN(maxSize))
		fillRandom(rng, b)
		return b
	case k < garbageRandomEighths+garbageRuntEighths:
		b := make([]byte, 1+rng.IntN(3))
		fillRandom(rng, b)
		return b
	default:
		b := make([]byte, transportMin+rng.IntN(maxSize-transportMin+1))
		fillRandom(rng, b)
		b[0], b[1], b[2], b[3] = 4, 0, 0, 0
		return b
	}
}

// BadMACInitiation returns a handshake initiation that passes every check
// before mac1: type 1, reserved zero, 148 bytes, a random sender index and
// a random Noise body, then a random mac1 and a zero mac2 (as an initiator
// without a cookie sends).
func BadMACInitiation(rng *rand.Rand) []byte {
	b := make([]byte, initiationSize)
	fillRandom(rng, b[:mac2Off])
	b[0], b[1], b[2], b[3] = 1, 0, 0, 0
	return b
}

func fillRandom(rng *rand.Rand, b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, rng.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// floodPool is the datagrams a flooder cycles through. Generating every
// datagram afresh would cost the flooder CPU that the gateway and the
// measured stream share on a small machine; instead a pool of distinct
// datagrams is made once and, before each send, their index field (bytes
// 4..8: receiver index of a transport message, sender index of an
// initiation) gets a new random value.
func pool(kind string, n int, seed uint64) ([][]byte, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pool := make([][]byte, n)
	for i := range pool {
		switch kind {
		case Garbage:
			pool[i] = GarbagePacket(rng, i)
		case BadMAC:
			pool[i] = BadMACInitiation(rng)
		default:
			return nil, fmt.Errorf("unknown flood kind %q (want %s or %s)", kind, Garbage, BadMAC)
		}
	}
	return pool, nil
}
