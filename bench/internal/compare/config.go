// Package compare is bhbench's mode comparison: for each mode (kernel
// forwarding, bridgehead with each cipher, wireguard-go), in interleaved
// runs on a fresh lab each, it measures TCP and small-packet UDP
// throughput, ICMP round-trip time idle and under load, and gateway CPU
// per GB, then reports the medians as Markdown, JSON and an SVG chart.
package compare

import (
	"io"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/modes"
	"github.com/bridgehead/bridgehead/bench/internal/sched"
)

// Config is one benchmark invocation.
type Config struct {
	Tools    modes.Tools
	Variants []modes.Variant
	Runs     int
	// Duration of each measurement.
	Duration time.Duration
	// TunMTU is the MTU of the tunnel interfaces (bridgehead's
	// interface.mtu, the wg interface); WANMTU the WAN veth's.
	TunMTU, WANMTU int
	// Streams is the number of parallel streams of the multi-stream test.
	Streams int
	// UDPSize is the payload of the small-packet test; UDPBitrate its
	// iperf3 -b (0: as fast as the sender can).
	UDPSize    int
	UDPBitrate string
	// PingInterval is the gap between ICMP echo requests.
	PingInterval time.Duration
	// GatewaySched, unless zero, is the scheduling policy (real-time, or
	// a short fair slice) every thread of both gateway processes runs
	// under while a variant is measured (a control: how much of the
	// latency is the gateways' wait for a CPU).
	GatewaySched sched.Policy
	// OutDir receives results.{json,md,svg} and, under work/, the configs
	// and logs of each run.
	OutDir string
	// Prefix names the namespaces (PREFIX-a-node, ...); unique per process.
	Prefix string
	// Progress receives what the harness is doing; Verbose adds every
	// command.
	Progress io.Writer
	Verbose  bool
}

// Metric keys of Sample.Values and Report.Medians.
const (
	MTCP1        = "tcp1_mbps"
	MTCPN        = "tcpN_mbps"
	MTCPRev      = "tcp1_reverse_mbps"
	MUDPPPS      = "udp_small_delivered_pps"
	MUDPLoss     = "udp_small_loss_pct"
	MRTTIdle50   = "rtt_idle_p50_ms"
	MRTTIdle99   = "rtt_idle_p99_ms"
	MRTTLoad50   = "rtt_load_p50_ms"
	MRTTLoad99   = "rtt_load_p99_ms"
	MRTTLoadLoss = "rtt_load_lost_pct"
	MRRLoad50    = "udp_rr_load_p50_ms"
	MRRLoad99    = "udp_rr_load_p99_ms"
	MRRLoadLoss  = "udp_rr_load_lost_pct"
	// The same round trips ended at the kernel's receive stamp (package
	// rxstamp), without the harness's own scheduling delay in the pod
	// namespace.
	MRTTLoadK50  = "rtt_load_kernel_p50_ms"
	MRTTLoadK99  = "rtt_load_kernel_p99_ms"
	MRRLoadK50   = "udp_rr_load_kernel_p50_ms"
	MRRLoadK99   = "udp_rr_load_kernel_p99_ms"
	MCPUA        = "cpu_gw_a_s_per_gb"
	MCPUB        = "cpu_gw_b_s_per_gb"
	MSoftirq     = "softirq_s_per_gb"
	MRetransmits = "tcp1_retransmits"
	MExpressN    = "express_b_tcpN_datagrams"
	MStrays      = "lane_strays_datagrams"
)

// Sample is one run of one variant.
type Sample struct {
	Variant string             `json:"variant"`
	Run     int                `json:"run"`
	Values  map[string]float64 `json:"values"`
	// GatewaySched says, with -gateway-sched, how many threads of each
	// gateway ran under the policy at the end of the loaded test
	// ("gw-a 14/14 fifo:10").
	GatewaySched []string `json:"gateway_sched_threads,omitempty"`
	Error        string   `json:"error,omitempty"`
}
