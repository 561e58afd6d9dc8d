package crypto

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestKeyRoundTrip(t *testing.T) {
	priv, err := GeneratePrivateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if priv[0]&7 != 0 || priv[31]&128 != 0 || priv[31]&64 == 0 {
		t.Fatalf("private key not clamped: %x", priv)
	}
	p2, err := ParsePrivateKey("  " + priv.String() + "\n")
	if err != nil || p2 != priv {
		t.Fatalf("ParsePrivateKey round trip: %v", err)
	}
	pub := priv.PublicKey()
	q, err := ParsePublicKey("\t" + pub.String() + " \n")
	if err != nil || q != pub {
		t.Fatalf("ParsePublicKey round trip: %v", err)
	}
}

func TestPublicKeyKnownVector(t *testing.T) {
	// RFC 7748 section 6.1, Alice.
	priv, err := ParsePrivateKey(base64.StdEncoding.EncodeToString(mustHex(t, "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")))
	if err != nil {
		t.Fatal(err)
	}
	want := mustHex(t, "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
	if got := priv.PublicKey(); !bytes.Equal(got[:], want) {
		t.Fatalf("public key %x, want %x", got, want)
	}
}

func TestParseKeyErrors(t *testing.T) {
	zero := base64.StdEncoding.EncodeToString(make([]byte, 32))
	short := base64.StdEncoding.EncodeToString(make([]byte, 31))
	// A point of order 8 on curve25519 (a standard low-order input).
	lowOrder := base64.StdEncoding.EncodeToString(mustHex(t, "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"))
	one := make([]byte, 32)
	one[0] = 1 // the point x=1 has order 4
	tests := []struct {
		name, in, want string
		public         bool
	}{
		{"private bad base64", "not base64!!", "base64", false},
		{"private empty", "   ", "empty", false},
		{"private short", short, "31 bytes", false},
		{"private zero", zero, "all zero", false},
		{"public bad base64", "@@@@", "base64", true},
		{"public short", short, "31 bytes", true},
		{"public zero", zero, "all zero", true},
		{"public low order", lowOrder, "low-order", true},
		{"public order 4", base64.StdEncoding.EncodeToString(one), "low-order", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.public {
				_, err = ParsePublicKey(tc.in)
			} else {
				_, err = ParsePrivateKey(tc.in)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestGeneratePrivateKeyReadError(t *testing.T) {
	if _, err := GeneratePrivateKey(bytes.NewReader(make([]byte, 5))); err == nil {
		t.Fatal("short random source: want error")
	}
}

func TestCipherKind(t *testing.T) {
	for _, c := range ciphers {
		got, err := ParseCipher(c.String())
		if err != nil || got != c {
			t.Fatalf("ParseCipher(%q) = %v, %v", c.String(), got, err)
		}
	}
	for _, s := range []string{"", "AES", "chacha", "aesgcm2"} {
		if _, err := ParseCipher(s); !errors.Is(err, ErrCipher) {
			t.Fatalf("ParseCipher(%q): err %v, want ErrCipher", s, err)
		}
	}
	if s := CipherKind(0).String(); s != "CipherKind(0)" {
		t.Fatalf("zero CipherKind String = %q", s)
	}
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
