package config

import (
	"strings"
	"testing"
)

// TestCheckProbes: probe intervals outside the router's range are refused
// at their line; readyWindow, now unused, is a warning.
func TestCheckProbes(t *testing.T) {
	tests := []struct {
		name          string
		repl          map[int]string
		problem, warn string // "file:line: field: substring", "" for none
	}{
		{name: "default"},
		{name: "in range", repl: map[int]string{27: "    keepalive: 25s\n    probeInterval: 150ms"}},
		{name: "too short", repl: map[int]string{27: "    keepalive: 25s\n    probeInterval: 10ms"},
			problem: "bridgehead.yaml:28: sites[0].probeInterval: 10ms is out of range: probe intervals go from 50ms"},
		{name: "too long", repl: map[int]string{27: "    keepalive: 25s\n    probeInterval: 1m"},
			problem: "bridgehead.yaml:28: sites[0].probeInterval: 1m0s is out of range"},
		{name: "readyWindow", repl: map[int]string{16: "  listen: 127.0.0.1:9090\n  readyWindow: 90s"},
			warn: "bridgehead.yaml:17: metrics.readyWindow: readyWindow is no longer used"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.repl)
			problems, warnings := Check(c, CheckOptions{SkipPrivateKey: true})
			for _, x := range []struct {
				what, want string
				got        ErrorList
			}{{"problems", tc.problem, problems}, {"warnings", tc.warn, warnings}} {
				got := x.got.Error()
				if len(x.got) == 0 {
					got = ""
				}
				switch {
				case x.want == "" && got != "":
					t.Errorf("%s: %s", x.what, got)
				case x.want != "" && !strings.Contains(got, x.want):
					t.Errorf("%s = %q, want %q", x.what, got, x.want)
				}
			}
		})
	}
	if DefaultProbeInterval < MinProbeInterval || DefaultProbeInterval > MaxProbeInterval {
		t.Errorf("default %s outside [%s, %s]", DefaultProbeInterval, MinProbeInterval, MaxProbeInterval)
	}
}
