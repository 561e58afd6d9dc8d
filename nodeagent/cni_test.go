package nodeagent

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConflist(t *testing.T) {
	tests := []struct {
		name   string
		d      Desired
		o      CNIOptions
		ranges []string
		mtu    float64
	}{
		{"dual stack", Desired{Node: "a1", PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), PodCIDR6: netip.MustParsePrefix("fd00:244:0:1::/64")},
			CNIOptions{MTU: 1400}, []string{"10.244.1.0/24", "fd00:244:0:1::/64"}, 1400},
		{"IPv4 only", Desired{Node: "b2", PodCIDR: netip.MustParsePrefix("10.245.2.0/24")},
			CNIOptions{}, []string{"10.245.2.0/24"}, 0},
		{"IPv6 only", Desired{Node: "v6", PodCIDR6: netip.MustParsePrefix("fd00:1::/64")},
			CNIOptions{}, []string{"fd00:1::/64"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Conflist(&tc.d, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			var l struct {
				CNIVersion string           `json:"cniVersion"`
				Name       string           `json:"name"`
				Plugins    []map[string]any `json:"plugins"`
			}
			if err := json.Unmarshal(b, &l); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if l.CNIVersion != "1.0.0" || l.Name != CNINetworkName || len(l.Plugins) != 3 {
				t.Fatalf("conflist header %q %q %d plugins:\n%s", l.CNIVersion, l.Name, len(l.Plugins), b)
			}
			var types []string
			for _, p := range l.Plugins {
				types = append(types, p["type"].(string))
			}
			if strings.Join(types, ",") != "bridge,portmap,loopback" {
				t.Errorf("plugins %v", types)
			}
			br := l.Plugins[0]
			if br["isGateway"] != true || br["ipMasq"] != false || br["bridge"] != DefaultBridge {
				t.Errorf("bridge plugin %v", br)
			}
			if mtu, _ := br["mtu"].(float64); mtu != tc.mtu {
				t.Errorf("mtu %v, want %v", br["mtu"], tc.mtu)
			}
			ipam := br["ipam"].(map[string]any)
			var ranges []string
			for _, set := range ipam["ranges"].([]any) {
				ranges = append(ranges, set.([]any)[0].(map[string]any)["subnet"].(string))
			}
			if ipam["type"] != "host-local" || strings.Join(ranges, " ") != strings.Join(tc.ranges, " ") {
				t.Errorf("ipam %v, want ranges %v", ipam, tc.ranges)
			}
			again, _ := Conflist(&tc.d, tc.o)
			if string(again) != string(b) {
				t.Error("Conflist is not deterministic")
			}
		})
	}
	if _, err := Conflist(&Desired{Node: "x"}, CNIOptions{}); err == nil {
		t.Error("Conflist without a pod CIDR: no error")
	}
}

func TestWriteConflist(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d") // created on demand
	data := []byte(`{"a":1}` + "\n")
	changed, err := WriteConflist(dir, data)
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v", changed, err)
	}
	path := filepath.Join(dir, CNIConfName)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(path, old, old)
	if changed, err := WriteConflist(dir, data); err != nil || changed {
		t.Fatalf("same data: changed=%v err=%v", changed, err)
	}
	if st, _ := os.Stat(path); !st.ModTime().Equal(old) {
		t.Error("unchanged config was rewritten")
	}
	if changed, err := WriteConflist(dir, []byte(`{"a":2}`)); err != nil || !changed {
		t.Fatalf("new data: changed=%v err=%v", changed, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d files, want only the conflist (no temporary files)", len(ents))
	}
}

func TestInstallPlugins(t *testing.T) {
	from, bin := t.TempDir(), filepath.Join(t.TempDir(), "bin")
	for _, n := range []string{"bridge", "host-local", "portmap"} {
		os.WriteFile(filepath.Join(from, n), []byte("image "+n), 0o644)
	}
	os.MkdirAll(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "bridge"), []byte("node's own"), 0o755)

	copied, err := InstallPlugins(bin, from, []string{"bridge", "host-local", "portmap"})
	if err != nil || strings.Join(copied, ",") != "host-local,portmap" {
		t.Fatalf("copied %v err %v", copied, err)
	}
	if b, _ := os.ReadFile(filepath.Join(bin, "bridge")); string(b) != "node's own" {
		t.Error("a plugin already on the node was replaced")
	}
	if st, _ := os.Stat(filepath.Join(bin, "portmap")); st.Mode().Perm() != 0o755 {
		t.Errorf("installed plugin mode %v", st.Mode())
	}
	if copied, err := InstallPlugins(bin, from, []string{"bridge", "host-local", "portmap"}); err != nil || len(copied) != 0 {
		t.Errorf("second install copied %v err %v", copied, err)
	}
	_, err = InstallPlugins(bin, from, []string{"loopback"})
	if err == nil || !strings.Contains(err.Error(), "[loopback] are neither in "+bin+" nor in "+from) {
		t.Errorf("missing plugin: %v", err)
	}
}
