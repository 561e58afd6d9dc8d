// Package flood is bhbench -flood: while one TCP stream runs pod A → pod
// B through bridgehead, a flooder in a fifth namespace sends gateway B's
// UDP port garbage, then handshake initiations with bad MACs. Each phase
// reports throughput, gateway B's memory, CPU, drop reasons and handshake
// work (from its metrics page) and the kernel's UDP and softnet counters,
// and the report checks the targets of the flood work.
package flood

import (
	"io"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/flooder"
	"github.com/bridgehead/bridgehead/bench/internal/modes"
)

// Config is one flood measurement (bhbench -flood): while a TCP
// stream runs pod A → pod B through bridgehead, a flooder in a fifth
// namespace sends gateway B's UDP port garbage, then handshake
// initiations with bad MACs.
type Config struct {
	Tools modes.Tools
	// Cipher is bridgehead's cipher.
	Cipher string
	// Duration of each TCP measurement; each flood starts Lead
	// before it and ends Lead after it.
	Duration time.Duration
	// PPS is the flood rate the flooder aims at; Batch its datagrams per
	// sendmmsg call.
	PPS   float64
	Batch int
	// TunMTU, WANMTU as in Config.
	TunMTU, WANMTU int
	// Worker is the bhbench binary, run as `Worker flood-worker ...` in
	// the flood namespace.
	Worker string
	// Control adds a phase flooding a closed port of gateway B (kernel
	// work only, bridgehead not involved), to tell the cost of the flood
	// to the machine from the cost of bridgehead handling it.
	Control bool
	// OutDir receives results.{json,md} and, under work/flood, the configs
	// and logs.
	OutDir string
	// Prefix names the namespaces (PREFIX-a-node, ..., PREFIX-flood).
	Prefix string
	// Progress receives what the harness is doing; Verbose adds every
	// command.
	Progress io.Writer
	Verbose  bool
}

// Lead is how long a flood runs before the TCP measurement starts
// (so that the stream meets the flood at full rate) and after it ends.
const Lead = time.Second

// Phases of a flood measurement, in order.
const (
	PhaseBaseline      = "baseline"
	PhaseControl       = "control_closed_port"
	PhaseGarbage       = "garbage"
	PhaseBadMAC        = "badmac"
	PhaseBaselineAfter = "baseline_after"
)

// floodPhaseDef is one phase: its flood kind ("" for none) and the port of
// gateway B it floods.
type floodPhaseDef struct {
	name, kind, label string
	port              int
}

// floodPhases are the phases in order. The second baseline shows how
// much the unflooded stream drifts by itself: a ratio near 0.9 means
// little when the baselines differ as much. The control phase (with
// control) sends the garbage flood to a port nobody listens on.
func floodPhases(control bool) []floodPhaseDef {
	ps := []floodPhaseDef{{PhaseBaseline, "", "baseline", 0}}
	if control {
		ps = append(ps, floodPhaseDef{PhaseControl, flooder.Garbage, "control: garbage to a closed port", ControlPort})
	}
	return append(ps,
		floodPhaseDef{PhaseGarbage, flooder.Garbage, "garbage flood", 51820},
		floodPhaseDef{PhaseBadMAC, flooder.BadMAC, "bad-MAC initiation flood", 51820},
		floodPhaseDef{PhaseBaselineAfter, "", "baseline after", 0},
	)
}

// ControlPort is the closed port of gateway B the control phase floods.
const ControlPort = 51821

// Reasons are the outside drop reasons a flood can cause, shown one
// row each.
var Reasons = []string{"runt", "unknown_type", "unknown_index", "bad_tag", "bad_size", "bad_mac", "handshake_busy", "cookie_required", "rate_limited"}

// Targets of the flood measurement (the acceptance criteria).
const (
	TargetThroughputRatio = 0.90
	TargetRSSGrowthMiB    = 50
	TargetFloodPPS        = 100000
)

// Target names.
const (
	TThroughput = "throughput_ratio_ge_0.90"
	TRSS        = "rss_growth_lt_50_mib"
	TDH         = "dh_operations_eq_0"
	TFloodRate  = "flood_pps_ge_100000"
)
