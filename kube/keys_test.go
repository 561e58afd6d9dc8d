package kube

import (
	"encoding/base64"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// TestGatewayKeysRollover: a rollover the previous key signed moves the
// catalog entry to the new key even while spec pins the old one, and
// lists the old one until the overlap ends; an unsigned or badly signed
// claim, or one from a key nobody trusts, changes nothing (approve-key as
// today).
func TestGatewayKeysRollover(t *testing.T) {
	key := func() bhcrypto.PrivateKey {
		k, err := bhcrypto.GeneratePrivateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k1, k2, stranger := key(), key(), key()
	until := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	sign := func(prev bhcrypto.PrivateKey, next bhcrypto.PublicKey, at time.Time) string {
		sig, err := bhcrypto.SignRollover(prev, next, at, nil)
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(sig[:])
	}
	gw := func(pinned string, status string, prev string, sig string) *v1.Gateway {
		g := &v1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "site-a.gw-a1"}}
		g.Spec.Site, g.Spec.PublicKey, g.Spec.Endpoint = "site-a", pinned, "198.51.100.1:51820"
		g.Status.PublicKey = status
		if prev != "" {
			g.Status.PreviousPublicKey, g.Status.KeySignature = prev, sig
			g.Status.PreviousKeyExpires = &metav1.Time{Time: until}
		}
		return g
	}
	p1, p2 := k1.PublicKey().String(), k2.PublicKey().String()
	good := sign(k1, k2.PublicKey(), until)
	tests := []struct {
		name           string
		g              *v1.Gateway
		wantKey, wantP string
	}{
		{"pinned old key vouches for the new", gw(p1, p2, p1, good), p2, p1},
		{"unpinned: the overlap is listed", gw("", p2, p1, good), p2, p1},
		{"no rollover", gw(p1, p1, "", ""), p1, ""},
		{"no signature", gw(p1, p2, p1, ""), p1, ""},
		{"signature for another overlap end", gw(p1, p2, p1, sign(k1, k2.PublicKey(), until.Add(time.Hour))), p1, ""},
		{"signed by a key nobody trusts", gw(p1, p2, stranger.PublicKey().String(), sign(stranger, k2.PublicKey(), until)), p1, ""},
		{"garbage signature", gw(p1, p2, p1, "AAAA"), p1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := gatewayToConfig(tc.g)
			if err != nil {
				t.Fatal(err)
			}
			if out.PublicKey != tc.wantKey || out.PreviousPublicKey != tc.wantP {
				t.Fatalf("catalog key %s previous %q; want %s previous %q", out.PublicKey, out.PreviousPublicKey, tc.wantKey, tc.wantP)
			}
			if tc.wantP != "" && !out.PreviousKeyExpires.Equal(until) {
				t.Fatalf("previousKeyExpires %v", out.PreviousKeyExpires)
			}
		})
	}
}
