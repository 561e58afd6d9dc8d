package crypto

import (
	"bytes"
	"testing"
)

// TestForgedResponseCost: a response with a valid mac1 and our pending
// sender index, but forged (anyone who saw the initiation can make one),
// fails without spending the initiation and costs only the two X25519
// operations of reading it: the state after message 1 is kept, not
// rebuilt with three more. The genuine response still completes.
func TestForgedResponseCost(t *testing.T) {
	for _, kind := range ciphers {
		a := testIdentity(t, 1, kind, []byte("p"))
		b := testIdentity(t, 2, kind, []byte("p"))
		in, msg1, err := a.CreateInitiation(b.Public, 11, testNow)
		if err != nil {
			t.Fatal(err)
		}
		ri, err := b.ConsumeInitiation(msg1)
		if err != nil {
			t.Fatal(err)
		}
		_, resp, err := b.CreateResponse(ri, 22, testNow)
		if err != nil {
			t.Fatal(err)
		}
		forged := bytes.Clone(resp)
		forged[respNoiseOff+40] ^= 1 // the empty payload's tag
		writeMAC1(forged, a.Public)
		before := in.dh.ops
		const n = 10
		for range n {
			if _, err := in.ConsumeResponse(forged, testNow); err == nil {
				t.Fatal("a forged response completed the handshake")
			}
		}
		if per := float64(in.dh.ops-before) / n; per > 2 {
			t.Errorf("%v: %.1f X25519 operations per forged response, want 2", kind, per)
		}
		if _, err := in.ConsumeResponse(resp, testNow); err != nil {
			t.Fatalf("%v: the genuine response after forged ones: %v", kind, err)
		}
	}
}

// BenchmarkForgedResponse is the initiator's cost of one forged response
// to a pending initiation (valid mac1 and index, bad Noise message).
func BenchmarkForgedResponse(b *testing.B) {
	a := testIdentity(b, 1, ChaChaPoly, []byte("p"))
	r := testIdentity(b, 2, ChaChaPoly, []byte("p"))
	in, msg1, err := a.CreateInitiation(r.Public, 11, testNow)
	if err != nil {
		b.Fatal(err)
	}
	ri, err := r.ConsumeInitiation(msg1)
	if err != nil {
		b.Fatal(err)
	}
	_, resp, err := r.CreateResponse(ri, 22, testNow)
	if err != nil {
		b.Fatal(err)
	}
	resp[respNoiseOff+40] ^= 1
	writeMAC1(resp, a.Public)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.ConsumeResponse(resp, testNow); err == nil {
			b.Fatal("forged response accepted")
		}
	}
}

// FuzzForgedThenGenuine: any response with our index and a valid mac1
// that is not the responder's fails without spending the initiation,
// and the genuine response completes it afterwards (the state after
// message 1, kept by firstMessageDH, is not damaged by a failed read).
func FuzzForgedThenGenuine(f *testing.F) {
	a := testIdentity(f, 1, ChaChaPoly, []byte("p"))
	b := testIdentity(f, 2, ChaChaPoly, []byte("p"))
	f.Add(make([]byte, ResponseSize))
	f.Add([]byte{MsgResponse, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		in, msg1, err := a.CreateInitiation(b.Public, 11, testNow)
		if err != nil {
			t.Fatal(err)
		}
		ri, err := b.ConsumeInitiation(msg1)
		if err != nil {
			t.Fatal(err)
		}
		_, resp, err := b.CreateResponse(ri, 22, testNow)
		if err != nil {
			t.Fatal(err)
		}
		forged := make([]byte, ResponseSize)
		copy(forged, data)
		copy(forged[:respNoiseOff], resp[:respNoiseOff]) // type, reserved, indices
		writeMAC1(forged, a.Public)
		for range 2 {
			if _, err := in.ConsumeResponse(forged, testNow); err == nil {
				if !bytes.Equal(forged[:respMAC1Off], resp[:respMAC1Off]) {
					t.Fatal("a forged response completed the handshake")
				}
				return
			}
		}
		if _, err := in.ConsumeResponse(resp, testNow); err != nil {
			t.Fatalf("the genuine response after forged ones: %v", err)
		}
	})
}
