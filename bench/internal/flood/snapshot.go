package flood

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/lab"
	"github.com/bridgehead/bridgehead/bench/internal/modes"
	"github.com/bridgehead/bridgehead/bench/internal/procfs"
	"github.com/bridgehead/bridgehead/bench/internal/promtext"
)

// gwSnapshot is gateway B's counters at one moment.
type gwSnapshot struct {
	at          time.Time
	metrics     []promtext.Sample
	rssKiB      int64
	cpu, cpuA   float64
	busy, total float64
	udp         map[string]float64
	softnet     float64
}

func snapshotGateway(ctx context.Context, proc procfs.FS, t *lab.Topology, gw modes.Gateways) (gwSnapshot, error) {
	s := gwSnapshot{at: time.Now()}
	gwB := gw.B
	var err error
	if s.cpuA, err = proc.ProcessCPU(gw.A.PID()); err != nil {
		return s, err
	}
	c, err := proc.CPU()
	if err != nil {
		return s, err
	}
	s.busy, s.total = c.Busy, c.Total
	if s.metrics, err = modes.ScrapeBridgehead(ctx, t.NS(lab.BGW)); err != nil {
		return s, err
	}
	pid := gwB.PID()
	if s.rssKiB, _, err = proc.ProcessMemory(pid); err != nil {
		return s, err
	}
	if s.cpu, err = proc.ProcessCPU(pid); err != nil {
		return s, err
	}
	// /proc/PID/net is the network namespace of PID: gateway B's.
	u, err := proc.ProcessUDP(pid)
	if err != nil {
		return s, err
	}
	s.udp = map[string]float64{"InDatagrams": u.InDatagrams, "RcvbufErrors": u.RcvbufErrors, "InErrors": u.InErrors, "NoPorts": u.NoPorts}
	if s.softnet, err = proc.SoftnetDrops(); err != nil {
		return s, err
	}
	return s, nil
}

// fillDeltas sets ph's counters from two snapshots.
func fillDeltas(ph *Phase, a, b gwSnapshot, peakKiB int64) {
	ph.WindowS = b.at.Sub(a.at).Seconds()
	ph.RSSBeforeKiB, ph.RSSAfterKiB = a.rssKiB, b.rssKiB
	ph.RSSPeakKiB = max(peakKiB, a.rssKiB, b.rssKiB)
	ph.RSSGrowthMiB = kib2mib(max(ph.RSSPeakKiB, b.rssKiB) - a.rssKiB)
	if ph.WindowS > 0 {
		ph.GatewayCPUPct = 100 * (b.cpu - a.cpu) / ph.WindowS
		ph.GatewayACPUPct = 100 * (b.cpuA - a.cpuA) / ph.WindowS
	}
	if b.total > a.total {
		ph.MachineBusyPct = 100 * (b.busy - a.busy) / (b.total - a.total)
	}
	ph.Drops = map[string]float64{}
	for _, r := range Reasons {
		ph.Drops["outside/"+r] = 0
	}
	for _, s := range b.metrics {
		if s.Name != "bridgehead_dropped_packets_total" {
			continue
		}
		k := s.Labels["direction"] + "/" + s.Labels["reason"]
		if d := s.Value - promtext.Value(a.metrics, s.Name, s.Labels); d != 0 || strings.HasPrefix(k, "outside/") && slices.Contains(Reasons, s.Labels["reason"]) {
			ph.Drops[k] = d
		}
	}
	delta := func(name string) float64 {
		return promtext.Value(b.metrics, name, nil) - promtext.Value(a.metrics, name, nil)
	}
	ph.DHOps = delta("bridgehead_handshake_dh_operations_total")
	ph.CookieReplies = delta("bridgehead_handshake_cookie_replies_total")
	ph.Handshakes = map[string]float64{}
	for _, s := range b.metrics {
		if s.Name == "bridgehead_handshakes_total" {
			if d := s.Value - promtext.Value(a.metrics, s.Name, s.Labels); d != 0 {
				ph.Handshakes[s.Labels["result"]] = d
			}
		}
	}
	ph.UDP = map[string]float64{}
	for _, k := range []string{"InDatagrams", "RcvbufErrors", "InErrors", "NoPorts"} {
		ph.UDP[k] = b.udp[k] - a.udp[k]
	}
	ph.SoftnetDrops = b.softnet - a.softnet
}
