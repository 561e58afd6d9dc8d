package controller

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/controller/ipam"
)

func TestReleasesRoundTrip(t *testing.T) {
	exp := time.Date(2026, 12, 2, 5, 0, 0, 123456789, time.UTC)
	rs := []ipam.Released{
		{Node: "n1", Site: "a", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("fd00::/64")}, Expires: exp},
		{Node: "n2.example", Site: "b", CIDRs: []netip.Prefix{netip.MustParsePrefix("fd01::/80")}, Expires: exp.Add(time.Second)},
	}
	data := encodeReleases(rs)
	if want := "n1 a 2026-12-02T05:00:00.123456789Z 10.1.0.0/24,fd00::/64\nn2.example b 2026-12-02T05:00:01.123456789Z fd01::/80\n"; data != want {
		t.Errorf("encoded %q, want %q", data, want)
	}
	got, err := decodeReleases(data)
	if err != nil || !reflect.DeepEqual(got, rs) {
		t.Errorf("decoded %+v %v, want %+v", got, err, rs)
	}
}

func TestDecodeReleasesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, data, err string
		kept            int
	}{
		{"empty", "", "", 0},
		{"blank lines", "\n\n n1 a 2026-12-02T05:00:00Z 10.1.0.0/24 \n\n", "", 1},
		{"three fields", "n1 a 10.1.0.0/24\n", "released line 1: want 4 fields (node site expires cidrs), got 3", 0},
		{"bad time", "n1 a yesterday 10.1.0.0/24\n", `released line 1: expires "yesterday": not an RFC 3339 time`, 0},
		{"bad cidr, others kept", "n1 a 2026-12-02T05:00:00Z 10.1.0.0/24\nn2 a 2026-12-02T05:00:00Z 10.1.0.0/24,bogus\n",
			`released line 2: cidrs: "bogus" is not a CIDR`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeReleases(tc.data)
			if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
			if len(got) != tc.kept {
				t.Errorf("kept %d, want %d", len(got), tc.kept)
			}
		})
	}
}

// FuzzDecodeReleases: any data decodes without panicking, and what it
// keeps encodes and decodes to the same entries.
func FuzzDecodeReleases(f *testing.F) {
	f.Add("n1 a 2026-12-02T05:00:00.5Z 10.1.0.0/24,fd00::/64\n")
	f.Add("n1 a 2026-12-02T05:00:00Z bogus\nx\n")
	f.Fuzz(func(t *testing.T, data string) {
		rs, _ := decodeReleases(data)
		for _, r := range rs {
			if len(r.CIDRs) == 0 || strings.ContainsAny(r.Node+r.Site, " \t\n") {
				t.Fatalf("kept %+v", r)
			}
		}
		again, err := decodeReleases(encodeReleases(rs))
		if err != nil || len(again) != len(rs) {
			t.Fatalf("round trip of %+v: %+v %v", rs, again, err)
		}
		for i := range rs {
			if again[i].Node != rs[i].Node || again[i].Site != rs[i].Site || !again[i].Expires.Equal(rs[i].Expires) || !reflect.DeepEqual(again[i].CIDRs, rs[i].CIDRs) {
				t.Fatalf("round trip %+v -> %+v", rs[i], again[i])
			}
		}
	})
}

// releasedNodes returns n released nodes with AKS-like names, dual-stack
// blocks and expiries one millisecond apart.
func releasedNodes(n int, exp time.Time) []ipam.Released {
	rs := make([]ipam.Released, n)
	for i := range rs {
		rs[i] = ipam.Released{
			Node: fmt.Sprintf("aks-nodepool1-31415926-vmss%06x", i), Site: "westeurope-1",
			CIDRs: []netip.Prefix{
				netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24),
				netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, byte(i >> 8), byte(i)}), 64),
			},
			Expires: exp.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return rs
}

// TestShardReleases: every shard stays within the limit, the shards hold
// every entry once, in order, and a node keeps its shard while the count
// stays, or moves by half the count when it changes.
func TestShardReleases(t *testing.T) {
	exp := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	line := len(encodeReleases(releasedNodes(1, exp)))
	for _, tc := range []struct {
		name   string
		n      int
		limit  int
		shards int
	}{
		{"none", 0, 1000, 1},
		{"one", 1, 1000, 1},
		{"fits one exactly", 10, 0, 1}, // limit: their size
		{"two", 100, 60 * line, 2},
		{"many", 12000, maxReleasesShardBytes, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := releasedNodes(tc.n, exp)
			if tc.limit == 0 {
				tc.limit = len(encodeReleases(rs))
			}
			shards := shardReleases(rs, tc.limit)
			if len(shards) != tc.shards {
				t.Errorf("%d shards, want %d", len(shards), tc.shards)
			}
			where := map[string]int{}
			var all []ipam.Released
			for i, s := range shards {
				if len(s) > tc.limit {
					t.Errorf("shard %d: %d bytes, limit %d", i, len(s), tc.limit)
				}
				got, err := decodeReleases(s)
				if err != nil {
					t.Fatal(err)
				}
				for j, r := range got {
					if j > 0 && r.Expires.Before(got[j-1].Expires) {
						t.Errorf("shard %d out of order at %s", i, r.Node)
					}
					where[r.Node] = i
				}
				all = append(all, got...)
			}
			if len(all) != len(rs) || len(where) != len(rs) {
				t.Fatalf("%d entries in the shards (%d nodes), want %d", len(all), len(where), len(rs))
			}
			// Half of the nodes gone: each of the rest stays in its shard,
			// or, if the count halved, moves from i to i - count/2.
			fewer := shardReleases(rs[:len(rs)/2], tc.limit)
			for i, s := range fewer {
				got, _ := decodeReleases(s)
				for _, r := range got {
					if w := where[r.Node]; w != i && w != i+len(fewer) {
						t.Errorf("%s moved from shard %d of %d to %d of %d", r.Node, w, len(shards), i, len(fewer))
					}
				}
			}
		})
	}
}
