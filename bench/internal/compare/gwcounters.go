package compare

import (
	"context"

	"github.com/bridgehead/bridgehead/bench/internal/lab"
	"github.com/bridgehead/bridgehead/bench/internal/modes"
	"github.com/bridgehead/bridgehead/bench/internal/promtext"
)

// Counters of bridgehead's own that the report carries (metric names).
const (
	expressSent = "bridgehead_express_datagrams_total"
	laneStrays  = "bridgehead_lane_strays_total"
)

// gwCounters reads bridgehead's counters from both gateways' metrics
// (bridgehead variants only; for the others it records nothing): the
// express datagrams gateway B sends during the N-stream test, which are
// the pods' ACKs whenever the sparse sorting lets them ride the express
// lane, and the lane strays of both gateways over the TCP tests. A scrape
// that fails leaves its metric out of the sample (n/a) and is reported
// through say. One goroutine (runOne's) uses it.
type gwCounters struct {
	ctx      context.Context
	t        *lab.Topology
	on       bool
	say      func(string, ...any)
	express0 float64
	mark0    bool
}

func newGWCounters(ctx context.Context, t *lab.Topology, v modes.Variant, say func(string, ...any)) *gwCounters {
	return &gwCounters{ctx: ctx, t: t, on: v.Mode == modes.Bridgehead, say: say}
}

// value is one series of the gateway in role's namespace: name with
// exactly labels (nil: the series without labels).
func (g *gwCounters) value(role, name string, labels map[string]string) (float64, bool) {
	ss, err := modes.ScrapeBridgehead(g.ctx, g.t.NS(role))
	if err != nil {
		g.say("  %s: %v (left out of the results)", name, err)
		return 0, false
	}
	return promtext.Value(ss, name, labels), true
}

var sentLabels = map[string]string{"direction": "sent"}

// startN marks the start of the N-stream test.
func (g *gwCounters) startN() {
	if g.on {
		g.express0, g.mark0 = g.value(lab.BGW, expressSent, sentLabels)
	}
}

// stopN records the express datagrams B sent since startN.
func (g *gwCounters) stopN(v map[string]float64) {
	if !g.on || !g.mark0 {
		return
	}
	if x, ok := g.value(lab.BGW, expressSent, sentLabels); ok {
		v[MExpressN] = x - g.express0
	}
}

// strays records both gateways' lane strays so far.
func (g *gwCounters) strays(v map[string]float64) {
	if !g.on {
		return
	}
	a, okA := g.value(lab.AGW, laneStrays, nil)
	b, okB := g.value(lab.BGW, laneStrays, nil)
	if okA && okB {
		v[MStrays] = a + b
	}
}
