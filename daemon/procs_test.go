package daemon

import (
	"log/slog"
	"runtime"
	"testing"

	"github.com/bridgehead/bridgehead/udp"
)

func TestExpressProcs(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name  string
		loops int
		env   string
		want  int
		keepP bool
	}{
		{"no real-time loops", 0, "", base, false},
		{"outside loop only", 1, "", base + 1, true},
		{"steered: both loops", 2, "", base + 2, true},
		{"GOMAXPROCS from the environment", 2, "3", base, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("GOMAXPROCS", tc.env)
			}
			undo, keepP := expressProcs(tc.loops, log)
			if got := runtime.GOMAXPROCS(0); got != tc.want || keepP != tc.keepP {
				t.Errorf("GOMAXPROCS %d while running, loops keep their P %v; want %d, %v", got, keepP, tc.want, tc.keepP)
			}
			undo()
			if got := runtime.GOMAXPROCS(0); got != base {
				t.Errorf("GOMAXPROCS %d after undo, want %d", got, base)
			}
		})
	}
}

func TestExpressLoops(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ld       laneDevices
		priority int
		want     int
	}{
		{"no express lane", laneDevices{}, 10, 0},
		{"no priority", laneDevices{express: new(udp.LinuxBind), steered: true}, 0, 0},
		{"not steered", laneDevices{express: new(udp.LinuxBind)}, 10, 1},
		{"steered", laneDevices{express: new(udp.LinuxBind), steered: true}, 10, 2},
	} {
		if got := expressLoops(&tc.ld, tc.priority); got != tc.want {
			t.Errorf("%s: %d loops, want %d", tc.name, got, tc.want)
		}
	}
}
