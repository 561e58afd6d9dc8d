package crypto

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Fuzz seeds under testdata/fuzz are real messages produced by the
// deterministic helpers below; TestFuzzSeedsValid keeps them honest and
// BRIDGEHEAD_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds rewrites
// them.

const (
	fuzzInitIndex = 0x11223344
	fuzzRespIndex = 0x55667788
)

// fuzzInitiator and fuzzResponder are the deterministic identities used
// by the fuzz targets and their seeds.
func fuzzInitiator(t testing.TB) *Identity {
	return testIdentity(t, 1, ChaChaPoly, Prologue("fuzz"))
}

func fuzzResponder(t testing.TB) *Identity {
	return testIdentity(t, 2, ChaChaPoly, Prologue("fuzz"))
}

// fuzzInitiation returns the deterministic initiation the fuzz targets
// use.
func fuzzInitiation(t testing.TB) (*Initiation, []byte) {
	in, msg, err := fuzzInitiator(t).CreateInitiation(fuzzResponder(t).Public, fuzzInitIndex, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return in, msg
}

// fuzzMessages returns real seeds: an initiation, the matching response
// and transport packets for both ciphers.
func fuzzMessages(t testing.TB) (initiation, response, aesPkt, chachaPkt []byte) {
	_, initiation = fuzzInitiation(t)
	r := fuzzResponder(t)
	ri, err := r.ConsumeInitiation(initiation)
	if err != nil {
		t.Fatal(err)
	}
	if _, response, err = r.CreateResponse(ri, fuzzRespIndex, testNow); err != nil {
		t.Fatal(err)
	}
	a, _ := testKeypairs(t, AESGCM)
	aesPkt = seal(t, a, []byte("seed packet payload, 32 bytes..."))
	c, _ := testKeypairs(t, ChaChaPoly)
	chachaPkt = seal(t, c, []byte("seed packet payload, 32 bytes..."))
	return
}

func FuzzParseTransportHeader(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, c, ok := ParseTransportHeader(data)
		if !ok {
			return
		}
		if len(data) < TransportOverhead || data[0] != MsgTransport || data[1]|data[2]|data[3] != 0 {
			t.Fatalf("accepted invalid header % x", data)
		}
		if r2, c2, _ := ParseTransportHeader(data[:TransportOverhead]); r2 != r || c2 != c {
			t.Fatal("fields depend on body")
		}
	})
}

func FuzzConsumeInitiation(f *testing.F) {
	f.Add([]byte{MsgInitiation})
	r := fuzzResponder(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		ri, err := r.ConsumeInitiation(data)
		if err != nil {
			return
		}
		if len(data) != InitiationSize {
			t.Fatalf("accepted %d-byte initiation", len(data))
		}
		if _, msg, err := r.CreateResponse(ri, 1, testNow); err != nil || len(msg) != ResponseSize {
			t.Fatalf("CreateResponse after accepted initiation: %v", err)
		}
	})
}

func FuzzConsumeResponse(f *testing.F) {
	f.Add([]byte{MsgResponse})
	f.Fuzz(func(t *testing.T, data []byte) {
		in, _ := fuzzInitiation(t)
		kp, err := in.ConsumeResponse(data, testNow)
		if err != nil {
			return
		}
		if len(data) != ResponseSize || kp.LocalIndex != fuzzInitIndex {
			t.Fatalf("accepted bad response (len %d)", len(data))
		}
		if _, err := in.ConsumeResponse(data, testNow); err != ErrUsed {
			t.Fatalf("second ConsumeResponse: %v", err)
		}
	})
}

func FuzzOpen(f *testing.F) {
	f.Add([]byte{MsgTransport})
	_, aes := testKeypairs(f, AESGCM)
	_, chacha := testKeypairs(f, ChaChaPoly)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, kp := range []*Keypair{aes, chacha} {
			msg := bytes.Clone(data)
			pt, ctr, err := kp.Open(msg)
			if err != nil {
				continue
			}
			if len(pt) != len(data)-TransportOverhead {
				t.Fatalf("plaintext length %d for %d-byte message", len(pt), len(data))
			}
			_, c, ok := ParseTransportHeader(data)
			if !ok || c != ctr {
				t.Fatal("Open accepted a message ParseTransportHeader rejects")
			}
		}
	})
}

// fuzzSeedFiles lists the checked-in seeds that must stay valid.
func fuzzSeedFiles(t testing.TB) map[string][]byte {
	initiation, response, aesPkt, chachaPkt := fuzzMessages(t)
	return map[string][]byte{
		"FuzzParseTransportHeader/real-transport": chachaPkt,
		"FuzzConsumeInitiation/real-initiation":   initiation,
		"FuzzConsumeResponse/real-response":       response,
		"FuzzOpen/real-aesgcm":                    aesPkt,
		"FuzzOpen/real-chachapoly":                chachaPkt,
		// Near misses: one byte short.
		"FuzzConsumeInitiation/truncated": initiation[:len(initiation)-1],
		"FuzzConsumeResponse/truncated":   response[:len(response)-1],
		"FuzzOpen/truncated":              aesPkt[:len(aesPkt)-1],
	}
}

func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("BRIDGEHEAD_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set BRIDGEHEAD_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz seeds")
	}
	writeSeeds(t, fuzzSeedFiles(t))
}

// TestFuzzSeedsValid checks the checked-in seeds still equal what the
// helpers produce, so the "real" seeds really pass the cryptographic
// checks and exercise the deep paths of the fuzz targets.
func TestFuzzSeedsValid(t *testing.T) {
	checkSeeds(t, fuzzSeedFiles(t))
	// And the real ones are accepted.
	_, response, aesPkt, chachaPkt := fuzzMessages(t)
	in, _ := fuzzInitiation(t)
	if _, err := in.ConsumeResponse(response, testNow); err != nil {
		t.Fatalf("real response seed rejected: %v", err)
	}
	for kind, pkt := range map[CipherKind][]byte{AESGCM: aesPkt, ChaChaPoly: chachaPkt} {
		_, b := testKeypairs(t, kind)
		if _, _, err := b.Open(bytes.Clone(pkt)); err != nil {
			t.Fatalf("real %s packet seed rejected: %v", kind, err)
		}
	}
}

// quoteASCII renders b as a Go string literal using only printable ASCII,
// so seed files diff cleanly.
func quoteASCII(b []byte) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, c := range b {
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			sb.WriteString(`\x`)
			sb.WriteString(strconv.FormatUint(uint64(c)>>4, 16))
			sb.WriteString(strconv.FormatUint(uint64(c)&15, 16))
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// writeSeeds writes files (name "FuzzX/seed" -> input) as seed corpus
// files under testdata/fuzz.
func writeSeeds(t *testing.T, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join("testdata", "fuzz", filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		content := "go test fuzz v1\n[]byte(" + quoteASCII(data) + ")\n"
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkSeeds fails if a checked-in seed file of files is missing, not in
// the seed format, or no longer what the helpers produce.
func checkSeeds(t *testing.T, files map[string][]byte) {
	t.Helper()
	for name, want := range files {
		raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", filepath.FromSlash(name)))
		if err != nil {
			t.Fatalf("%s: %v (run with BRIDGEHEAD_WRITE_FUZZ_SEEDS=1)", name, err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: unexpected seed format", name)
		}
		got, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal([]byte(got), want) {
			t.Fatalf("%s: seed is stale (run with BRIDGEHEAD_WRITE_FUZZ_SEEDS=1)", name)
		}
	}
}
