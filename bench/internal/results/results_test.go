package results

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestFormatValue(t *testing.T) {
	cases := []struct {
		x        float64
		decimals int
		want     string
	}{
		{0, 0, "0"},
		{999, 0, "999"},
		{1000, 0, "1,000"},
		{1234567.4, 0, "1,234,567"},
		{-1500, 0, "-1,500"},
		{-150000, 0, "-150,000"},
		{1500, 1, "1500.0"}, // decimals: no separators
		{0.1234, 3, "0.123"},
	}
	for _, c := range cases {
		if got := FormatValue(c.x, c.decimals); got != c.want {
			t.Errorf("FormatValue(%g, %d) = %q, want %q", c.x, c.decimals, got, c.want)
		}
	}
}

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out", "sub")
	paths, err := Write(dir, []File{{Name: "a.md", Data: []byte("# a\n")}, {Name: "b.json", Data: []byte("{}\n")}})
	if err != nil || len(paths) != 2 {
		t.Fatalf("paths %v, %v", paths, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "b.json")); err != nil || string(b) != "{}\n" {
		t.Errorf("b.json: %q, %v", b, err)
	}
	// A file that cannot be written: the paths before it are returned.
	paths, err = Write(dir, []File{{Name: "c.md", Data: nil}, {Name: "missing/d.md", Data: nil}})
	if err == nil || len(paths) != 1 {
		t.Errorf("paths %v, err %v; want one path and an error", paths, err)
	}
}

func TestHostInfo(t *testing.T) {
	h := HostInfo("", "", "")
	if h.CPUs != runtime.NumCPU() || h.Kernel == "" {
		t.Errorf("%+v", h)
	}
	if h.Bridgehead != "" || h.Iperf3 != "" {
		t.Errorf("versions without binaries: %+v", h)
	}
}

// TestHostLine: the tools in the order bridgehead, wireguard-go, iperf3,
// the ones not used left out, the CPU model only when known.
func TestHostLine(t *testing.T) {
	for _, c := range []struct {
		h    Host
		want string
	}{
		{Host{Kernel: "6.8.0", CPUs: 4, CPUModel: "EPYC", Bridgehead: "bridgehead v1", Iperf3: "iperf 3.16", WireguardGo: "wireguard-go v0.0.2"},
			"Linux 6.8.0, 4 CPUs (EPYC); bridgehead v1; wireguard-go v0.0.2; iperf 3.16"},
		{Host{Kernel: "6.1", CPUs: 2, Bridgehead: "bridgehead v1", Iperf3: "iperf 3.16"},
			"Linux 6.1, 2 CPUs; bridgehead v1; iperf 3.16"},
	} {
		if got := c.h.Line(); got != c.want {
			t.Errorf("Line() = %q, want %q", got, c.want)
		}
	}
}

func TestJSONIsIndentedWithAFinalNewline(t *testing.T) {
	b, err := JSON(map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "{\n  \"a\": 1\n}\n"; got != want {
		t.Errorf("JSON = %q, want %q", got, want)
	}
	if _, err := JSON(func() {}); err == nil {
		t.Error("a func: no error")
	}
}
