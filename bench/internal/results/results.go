// Package results holds what both of bhbench's measurements (the mode
// comparison and the flood) write: the description of the host and its
// tools, the formatting of table figures, and the output files.
package results

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Host describes the machine and the tools.
type Host struct {
	Kernel      string `json:"kernel"`
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model,omitempty"`
	Bridgehead  string `json:"bridgehead,omitempty"`
	Iperf3      string `json:"iperf3,omitempty"`
	WireguardGo string `json:"wireguard_go,omitempty"`
}

// HostInfo describes this machine and the versions of the binaries given
// (each "" when not used).
func HostInfo(bridgehead, iperf3, wireguardGo string) Host {
	h := Host{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	ver := func(name string, args ...string) string {
		if name == "" {
			return ""
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, name, args...).CombinedOutput()
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	h.Bridgehead = ver(bridgehead, "version")
	h.Iperf3 = ver(iperf3, "--version")
	h.WireguardGo = ver(wireguardGo, "--version")
	return h
}

// File is one output file of a run.
type File struct {
	Name string
	Data []byte
}

// Write writes files into dir, in order, and returns the paths
// written (up to the first error).
func Write(dir string, files []File) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// FormatValue formats a figure of a results table: thousands separators
// for whole numbers of 1000 and more, else decimals places.
func FormatValue(x float64, decimals int) string {
	if math.Abs(x) >= 1000 && decimals == 0 {
		// Thousands separators for packet rates and the like.
		s := fmt.Sprintf("%.0f", x)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	}
	return fmt.Sprintf("%.*f", decimals, x)
}

// Line describes the host in the caption of a results table: "Linux
// KERNEL, N CPUs (MODEL); " and the versions of the tools used, in the
// order bridgehead, wireguard-go, iperf3.
func (h Host) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Linux %s, %d CPUs", h.Kernel, h.CPUs)
	if h.CPUModel != "" {
		fmt.Fprintf(&b, " (%s)", h.CPUModel)
	}
	b.WriteString("; ")
	var tools []string
	for _, t := range []string{h.Bridgehead, h.WireguardGo, h.Iperf3} {
		if t != "" {
			tools = append(tools, t)
		}
	}
	b.WriteString(strings.Join(tools, "; "))
	return b.String()
}

// JSON is v as JSON indented by two spaces, with a final newline: the
// results.json of a run.
func JSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
