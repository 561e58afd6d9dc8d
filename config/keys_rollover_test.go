package config

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testKeyPair returns a fresh X25519 private key file text and its public
// key, both base64.
func testKeyPair(t *testing.T) (priv, pub string) {
	t.Helper()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k.Bytes()), base64.StdEncoding.EncodeToString(k.PublicKey().Bytes())
}

func testPSKText(t *testing.T, n int) string {
	t.Helper()
	var lines []string
	for range n {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, base64.StdEncoding.EncodeToString(b))
	}
	return strings.Join(lines, "\n") + "\n"
}

// writeSecret writes data to a file of mode in dir and returns its path.
func writeSecret(t *testing.T, dir, name, data string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKeyRolloverFields: previousPublicKey, previousKeyExpires, keyOverlap
// and presharedKeys decode, and their Parse-time problems name the field
// and line.
func TestKeyRolloverFields(t *testing.T) {
	_, prev := testKeyPair(t)
	gwB := "        publicKey: fqE938us2KE1Qt7OiQiGSG+4Ak0NPMf5Xti7TvrWa3M="
	tests := []struct {
		name  string
		repl  map[int]string
		wants []want
	}{
		{"rollover", map[int]string{54: gwB + "\n        previousPublicKey: " + prev + "\n        previousKeyExpires: 2026-12-07T08:00:00Z"}, nil},
		{"psk and overlap", map[int]string{18: "clampMSS: false\nkeyOverlap: 2h\npresharedKeys:\n  - site: b\n    file: /etc/psk-b"}, nil},
		{"expiry missing", map[int]string{54: gwB + "\n        previousPublicKey: " + prev},
			[]want{{51, "sites[1].gateways[0].previousKeyExpires", "is required with previousPublicKey"}}},
		{"expiry alone", map[int]string{54: gwB + "\n        previousKeyExpires: 2026-12-07T08:00:00Z"},
			[]want{{55, "sites[1].gateways[0].previousKeyExpires", "without previousPublicKey"}}},
		{"expiry not a time", map[int]string{54: gwB + "\n        previousPublicKey: " + prev + "\n        previousKeyExpires: tomorrow"},
			[]want{{56, "sites[1].gateways[0].previousKeyExpires", "not an RFC 3339 time"}}},
		{"previous is a key in use", map[int]string{54: gwB + "\n        previousPublicKey: OS0XSjizsb6vrx/oJIcIQcX6UxvG6v22QCwSRmRIjBw=\n        previousKeyExpires: 2026-12-07T08:00:00Z"},
			[]want{{55, "sites[1].gateways[0].previousPublicKey", `key of gateway "gw-a2"`}}},
		{"previous not a key", map[int]string{54: gwB + "\n        previousPublicKey: nope\n        previousKeyExpires: 2026-12-07T08:00:00Z"},
			[]want{{55, "sites[1].gateways[0].previousPublicKey", "decodes to 3 bytes"}}},
		{"overlap out of range", map[int]string{18: "clampMSS: false\nkeyOverlap: 1s"},
			[]want{{19, "keyOverlap", "out of range"}}},
		{"psk for own and unknown sites, twice, no file", map[int]string{18: "clampMSS: false\npresharedKeys:\n  - site: a\n    file: x\n  - site: z\n    file: y\n  - site: b\n  - site: b\n    file: w"},
			[]want{
				{20, "presharedKeys[0].site", "this gateway's own site"},
				{22, "presharedKeys[1].site", "not the name of any site"},
				{24, "presharedKeys[2].file", "is required"},
				{25, "presharedKeys[3].site", "listed twice"},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFixture(t, tc.repl)
			if tc.wants == nil {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			matchErrors(t, asList(t, err), tc.wants)
			_ = c
		})
	}
	c := mustParse(t, map[int]string{
		18: "clampMSS: false\nkeyOverlap: 2h\npresharedKeys:\n  - site: b\n    file: /etc/psk-b",
		54: gwB + "\n        previousPublicKey: " + prev + "\n        previousKeyExpires: 2026-12-07T08:00:00Z",
	})
	g := c.Sites[1].Gateways[0]
	if g.PreviousPublicKey != prev || !g.PreviousKeyExpires.Equal(time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("previous key %q until %v", g.PreviousPublicKey, g.PreviousKeyExpires)
	}
	if c.KeyOverlapOrDefault() != 2*time.Hour || len(c.PresharedKeys) != 1 || c.PresharedKeys[0] != (PresharedKeyRef{"b", "/etc/psk-b"}) {
		t.Errorf("keyOverlap %v, presharedKeys %v", c.KeyOverlap, c.PresharedKeys)
	}
}

// TestKeyFiles: Check reads previousPrivateKeyFile and the preshared-key
// files: they must exist, be private and parse, and the previous key must
// be the one the local gateway's entry lists.
func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	privText, pub := testKeyPair(t)
	otherPriv, _ := testKeyPair(t)
	gwA := "        publicKey: SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4="
	listed := gwA + "\n        previousPublicKey: " + pub + "\n        previousKeyExpires: 2026-12-07T08:00:00Z"
	prevOK := writeSecret(t, dir, "prev.key", privText+"\n", 0o600)
	prevOther := writeSecret(t, dir, "other.key", otherPriv+"\n", 0o600)
	pskOK := writeSecret(t, dir, "psk-b", testPSKText(t, 2), 0o600)
	pskOpen := writeSecret(t, dir, "psk-open", testPSKText(t, 1), 0o644)
	pskThree := writeSecret(t, dir, "psk-3", testPSKText(t, 3), 0o600)
	tests := []struct {
		name    string
		repl    map[int]string
		problem string // substring of the one problem; "" for none
		field   string
	}{
		{"good", map[int]string{4: "privateKeyFile: gw-a1.key\npreviousPrivateKeyFile: " + prevOK, 18: "clampMSS: false\npresharedKeys: [{site: b, file: " + pskOK + "}]", 32: listed}, "", ""},
		{"previous key not the listed one", map[int]string{4: "privateKeyFile: gw-a1.key\npreviousPrivateKeyFile: " + prevOther, 32: listed}, "but this gateway's previousPublicKey is", "previousPrivateKeyFile"},
		{"previous key missing", map[int]string{4: "privateKeyFile: gw-a1.key\npreviousPrivateKeyFile: " + filepath.Join(dir, "none"), 32: listed}, "does not exist", "previousPrivateKeyFile"},
		{"psk file readable by others", map[int]string{18: "clampMSS: false\npresharedKeys: [{site: b, file: " + pskOpen + "}]"}, "group or others can access", "presharedKeys[0].file"},
		{"psk file with three keys", map[int]string{18: "clampMSS: false\npresharedKeys: [{site: b, file: " + pskThree + "}]"}, "line 3: more than 2 keys", "presharedKeys[0].file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.repl)
			r := &reporter{file: c.Path, lines: c.lines}
			checkKeyFiles(c, r, CheckOptions{})
			switch {
			case tc.problem == "" && len(r.errs) > 0:
				t.Fatalf("problems: %v", r.errs)
			case tc.problem != "" && (len(r.errs) != 1 || !strings.Contains(r.errs[0].Msg, tc.problem) || r.errs[0].Field != tc.field):
				t.Fatalf("problems %v, want one on %s containing %q", r.errs, tc.field, tc.problem)
			}
		})
	}
}

func FuzzParsePresharedKeysConfig(f *testing.F) {
	f.Add([]byte("# pair a-b\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE=\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParsePresharedKeys(data)
		if err != nil {
			return
		}
		if len(keys) == 0 || len(keys) > maxPresharedKeys {
			t.Fatalf("%d keys", len(keys))
		}
		for _, k := range keys {
			if len(k) != 32 || isZero(k) {
				t.Fatalf("bad key %x accepted", k)
			}
		}
	})
}
