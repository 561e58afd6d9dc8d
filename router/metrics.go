package router

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a Router's counters as Prometheus metrics. The data
// path only bumps atomics; values are read at scrape time. Register it on
// the registry the caller owns.
type Collector struct {
	r *Router

	drops          *prometheus.Desc
	txPackets      *prometheus.Desc
	txBytes        *prometheus.Desc
	rxPackets      *prometheus.Desc
	rxBytes        *prometheus.Desc
	lastHandshake  *prometheus.Desc
	sessionAge     *prometheus.Desc
	lastReceive    *prometheus.Desc
	queued         *prometheus.Desc
	endpoint       *prometheus.Desc
	handshakes     *prometheus.Desc
	handshakeQueue *prometheus.Desc
	dhOps          *prometheus.Desc
	cookieReplies  *prometheus.Desc
	peerUp         *prometheus.Desc
	peerHandshakes *prometheus.Desc
	filterAttached *prometheus.Desc
	probeRTT       *prometheus.Desc
	probes         *prometheus.Desc
	downs          *prometheus.Desc
	stateChanged   *prometheus.Desc
	unreachable    *prometheus.Desc
	laneStrays     *prometheus.Desc
	fragMisses     *prometheus.Desc
	cannotDeliver  *prometheus.Desc
	downReason     *prometheus.Desc
	canDeliver     *prometheus.Desc
	pathMTU        *prometheus.Desc
	mtuDegraded    *prometheus.Desc
	features       *prometheus.Desc
	express        *prometheus.Desc
	expressSteered *prometheus.Desc
	expressRT      *prometheus.Desc
	expressSpilled *prometheus.Desc
	expressPoliced *prometheus.Desc
}

// NewCollector returns a collector for r.
func NewCollector(r *Router) *Collector {
	peer := []string{"site", "gateway"}
	return &Collector{
		r:              r,
		drops:          prometheus.NewDesc("bridgehead_dropped_packets_total", "Packets not forwarded, by direction and reason.", []string{"direction", "reason"}, nil),
		txPackets:      prometheus.NewDesc("bridgehead_peer_sent_packets_total", "Packets sent to a remote gateway.", peer, nil),
		txBytes:        prometheus.NewDesc("bridgehead_peer_sent_bytes_total", "Inner bytes sent to a remote gateway.", peer, nil),
		rxPackets:      prometheus.NewDesc("bridgehead_peer_received_packets_total", "Authenticated packets received from a remote gateway.", peer, nil),
		rxBytes:        prometheus.NewDesc("bridgehead_peer_received_bytes_total", "Inner bytes delivered from a remote gateway.", peer, nil),
		lastHandshake:  prometheus.NewDesc("bridgehead_peer_last_handshake_timestamp_seconds", "Unix time of the last completed handshake (0: never).", peer, nil),
		sessionAge:     prometheus.NewDesc("bridgehead_peer_session_age_seconds", "Age of the session in use (0: none).", peer, nil),
		lastReceive:    prometheus.NewDesc("bridgehead_peer_last_receive_timestamp_seconds", "Unix time of the last authenticated packet (0: never).", peer, nil),
		queued:         prometheus.NewDesc("bridgehead_peer_queued_packets", "Packets waiting for a handshake.", peer, nil),
		endpoint:       prometheus.NewDesc("bridgehead_peer_endpoint_info", "Current UDP endpoint of a remote gateway.", append(peer, "endpoint"), nil),
		handshakes:     prometheus.NewDesc("bridgehead_handshakes_total", "Handshakes by outcome.", []string{"result"}, nil),
		handshakeQueue: prometheus.NewDesc("bridgehead_handshake_queue_length", "Handshake messages waiting to be processed.", nil, nil),
		dhOps:          prometheus.NewDesc("bridgehead_handshake_dh_operations_total", "Handshake messages that reached Diffie-Hellman work (valid mac1, and a cookie under load).", nil, nil),
		cookieReplies:  prometheus.NewDesc("bridgehead_handshake_cookie_replies_total", "Cookie replies sent instead of handshake work while under load.", nil, nil),
		peerHandshakes: prometheus.NewDesc("bridgehead_peer_handshakes_total", "Handshakes with a remote gateway by result: initiated, answered, completed, failed, send_failed (the message could not be sent); previous_key (answered with its or our previous static key during a key overlap), second_psk (completed with the pair's second preshared key, during a rotation), psk_mismatch (refused or failed: the pair's preshared keys differ).", append(peer, "result"), nil),
		filterAttached: prometheus.NewDesc("bridgehead_kernel_filter_attached", "1 while the eBPF early-drop filter checks datagrams in the kernel before they reach the outside socket (see earlyDrop), 0 without it.", nil, nil),
		peerUp:         prometheus.NewDesc("bridgehead_peer_up", "1 while the remote gateway is up: it answered our probes (or a handshake) within 3 probe intervals. Only gateways that are up carry flows while any of their site is.", peer, nil),
		probeRTT:       prometheus.NewDesc("bridgehead_peer_probe_rtt_seconds", "Round trip of the newest answered probe to a remote gateway (0: none yet).", peer, nil),
		probes:         prometheus.NewDesc("bridgehead_peer_probes_total", "Health probes to a remote gateway: sent, answered, and send_failed (sent, but refused by the kernel: a prohibit or blackhole route, no route; probes to the other gateways still go out).", append(peer, "result"), nil),
		downs:          prometheus.NewDesc("bridgehead_peer_down_total", "Times a remote gateway went down; each moved its flows to the site's other gateways.", peer, nil),
		express:        prometheus.NewDesc("bridgehead_express_datagrams_total", "Datagrams of the express lane: sent, sparse flows' packets sealed for a remote gateway's express lane; received, read from this gateway's express socket (with the handshakes and keepalives the kernel hashes there).", []string{"direction"}, nil),
		expressSteered: prometheus.NewDesc("bridgehead_express_steered", "1 while the kernel's steering program puts sparse flows on the express lane's TUN queue, which the express lane reads; 0 when the lanes' readers sort flows (no CAP_BPF) or there is no express lane.", nil, nil),
		expressSpilled: prometheus.NewDesc("bridgehead_express_spilled_total", "Datagrams read from the express socket that its outside loop did not handle itself but left, in order, to the spill loop on an ordinary goroutine: handshakes, relay messages and other lanes' transport messages the kernel hashed there, and express ones over the budget (bridgehead_express_policed_total). When the spill loop is behind they are dropped instead (reason express_overflow).", nil, nil),
		expressPoliced: prometheus.NewDesc("bridgehead_express_policed_total", "Transport messages with the express lane byte read from the express socket beyond the express loop's budget (ExpressRate a second, ExpressBurst at once), left to the spill loop: forged express datagrams, or a peer sending more than sparse flows on the express lane.", nil, nil),
		expressRT:      prometheus.NewDesc("bridgehead_express_realtime_threads", "Express lane loops running on a SCHED_FIFO thread of their own (expressPriority): 2 with steering, 1 without; fewer means the priority was refused (CAP_SYS_NICE; the gateway logs why).", nil, nil),
		laneStrays:     prometheus.NewDesc("bridgehead_lane_strays_total", "Transport messages a lane's socket received with another lane's lane byte: the receiver's GRO joined two lanes' runs from the same port and the kernel steered them whole by the first. The lane opens them; their flows may be reordered by up to a batch.", nil, nil),
		fragMisses:     prometheus.NewDesc("bridgehead_fragments_unmatched_total", "Later IP fragments whose first fragment was not seen (reordered, or too many fragmented datagrams at once): hashed by addresses and protocol, they may take another of the site's gateways than their flow.", nil, nil),
		unreachable:    prometheus.NewDesc("bridgehead_gateways_unreachable", "Remote gateways this one cannot reach: sending to them failed or their handshakes gave up, with no session set up since.", nil, nil),
		stateChanged:   prometheus.NewDesc("bridgehead_peer_state_change_timestamp_seconds", "Unix time a remote gateway last went up or down (0: never).", peer, nil),
		cannotDeliver:  prometheus.NewDesc("bridgehead_peer_cannot_deliver", "1 while a remote gateway reports that it cannot deliver to its own site (its LAN side is broken); it gets no flows.", peer, nil),
		downReason:     prometheus.NewDesc("bridgehead_peer_down_reason", "1 for the reason a remote gateway is down (no_answer, cannot_deliver, draining), 0 for the others.", append(peer, "reason"), nil),
		pathMTU:        prometheus.NewDesc("bridgehead_peer_path_mtu_bytes", "Largest inner packet the path to a remote gateway is known to carry, from padded probes (0: not checked yet); the tunnel MTU while the path is whole.", peer, nil),
		mtuDegraded:    prometheus.NewDesc("bridgehead_peer_mtu_degraded", "1 while full-size probes to a remote gateway go unanswered and small ones pass: it gets no flows while a whole gateway of its site is up.", peer, nil),
		features:       prometheus.NewDesc("bridgehead_peer_session_features", "1 while a remote gateway has said, on the session in use, that it reads lane bytes (feature lane_bytes: our flows spread over its lanes' sockets) or has an express lane (express: sparse flows go there); 0 until it says so on a new session (within a probe's round trip) and toward gateways that predate them.", append(peer, "feature"), nil),
		canDeliver:     prometheus.NewDesc("bridgehead_can_deliver", "1 while this gateway can deliver to its own site (LAN link up, routes to every node CIDR); 0 tells remote gateways to move its flows.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.drops, c.txPackets, c.txBytes, c.rxPackets, c.rxBytes,
		c.lastHandshake, c.sessionAge, c.lastReceive, c.queued, c.endpoint, c.handshakes, c.handshakeQueue,
		c.dhOps, c.cookieReplies, c.peerUp, c.peerHandshakes, c.filterAttached,
		c.probeRTT, c.probes, c.downs, c.stateChanged, c.unreachable, c.laneStrays, c.fragMisses, c.cannotDeliver, c.downReason, c.canDeliver, c.pathMTU, c.mtuDegraded, c.express, c.expressSteered, c.expressRT, c.expressSpilled, c.expressPoliced, c.features} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Every drop reason is exported,
// zero included, so alerts see the series before the first drop.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.r.filter.poll()
	attached := 0.0
	if c.r.FilterAttached() {
		attached = 1
	}
	ch <- prometheus.MustNewConstMetric(c.filterAttached, prometheus.GaugeValue, attached)
	ch <- prometheus.MustNewConstMetric(c.canDeliver, prometheus.GaugeValue, boolGauge(c.r.CanDeliver()))
	snap := c.r.drops.snapshot()
	for d := range snap {
		for reason, n := range snap[d] {
			ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(n), Direction(d).String(), Reason(reason).String())
		}
	}
	now := c.r.clock.Now()
	for _, s := range c.r.Peers() {
		l := []string{s.Site, s.Name}
		ch <- prometheus.MustNewConstMetric(c.txPackets, prometheus.CounterValue, float64(s.TxPackets), l...)
		ch <- prometheus.MustNewConstMetric(c.txBytes, prometheus.CounterValue, float64(s.TxBytes), l...)
		ch <- prometheus.MustNewConstMetric(c.rxPackets, prometheus.CounterValue, float64(s.RxPackets), l...)
		ch <- prometheus.MustNewConstMetric(c.rxBytes, prometheus.CounterValue, float64(s.RxBytes), l...)
		ch <- prometheus.MustNewConstMetric(c.lastHandshake, prometheus.GaugeValue, unixSeconds(s.LastHandshake), l...)
		ch <- prometheus.MustNewConstMetric(c.lastReceive, prometheus.GaugeValue, unixSeconds(s.LastReceive), l...)
		age := 0.0
		if !s.SessionCreated.IsZero() {
			age = now.Sub(s.SessionCreated).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.sessionAge, prometheus.GaugeValue, age, l...)
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(s.QueuedPackets), l...)
		ch <- prometheus.MustNewConstMetric(c.endpoint, prometheus.GaugeValue, 1, s.Site, s.Name, s.Endpoint.String())
		up := 0.0
		if s.Live.State == LiveUp {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.peerUp, prometheus.GaugeValue, up, l...)
		ch <- prometheus.MustNewConstMetric(c.probeRTT, prometheus.GaugeValue, s.Live.ProbeRTT.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue, float64(s.Live.ProbesSent), s.Site, s.Name, "sent")
		ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue, float64(s.Live.ProbeReplies), s.Site, s.Name, "answered")
		ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue, float64(s.Live.ProbeSendFailures), s.Site, s.Name, "send_failed")
		ch <- prometheus.MustNewConstMetric(c.downs, prometheus.CounterValue, float64(s.Live.Downs), l...)
		ch <- prometheus.MustNewConstMetric(c.stateChanged, prometheus.GaugeValue, unixSeconds(s.Live.LastChange), l...)
		ch <- prometheus.MustNewConstMetric(c.cannotDeliver, prometheus.GaugeValue, boolGauge(s.Live.CannotDeliver), l...)
		ch <- prometheus.MustNewConstMetric(c.pathMTU, prometheus.GaugeValue, float64(s.Live.PathMTU), l...)
		ch <- prometheus.MustNewConstMetric(c.mtuDegraded, prometheus.GaugeValue, boolGauge(s.Live.MTUDegraded), l...)
		ch <- prometheus.MustNewConstMetric(c.features, prometheus.GaugeValue, boolGauge(s.LaneBytes), s.Site, s.Name, "lane_bytes")
		ch <- prometheus.MustNewConstMetric(c.features, prometheus.GaugeValue, boolGauge(s.Express), s.Site, s.Name, "express")
		for _, reason := range []DownReason{DownNoAnswer, DownCannotDeliver, DownDraining} {
			ch <- prometheus.MustNewConstMetric(c.downReason, prometheus.GaugeValue,
				boolGauge(s.Live.State == LiveDown && s.Live.Reason == reason), s.Site, s.Name, strings.ReplaceAll(reason.String(), " ", "_"))
		}
		for _, h := range []struct {
			result string
			n      uint64
		}{{"initiated", s.HandshakesInitiated}, {"answered", s.HandshakesAnswered}, {"completed", s.HandshakesCompleted}, {"failed", s.HandshakesFailed}, {"send_failed", s.HandshakeSendErrors},
			{"previous_key", s.HandshakesPreviousKey}, {"second_psk", s.HandshakesSecondPSK}, {"psk_mismatch", s.PSKMismatches}} {
			ch <- prometheus.MustNewConstMetric(c.peerHandshakes, prometheus.CounterValue, float64(h.n), s.Site, s.Name, h.result)
		}
	}
	h := c.r.Handshakes()
	for _, v := range []struct {
		result string
		n      uint64
	}{{"initiated", h.Initiated}, {"completed", h.Completed}, {"answered", h.Answered}, {"timed_out", h.TimedOut}} {
		ch <- prometheus.MustNewConstMetric(c.handshakes, prometheus.CounterValue, float64(v.n), v.result)
	}
	ch <- prometheus.MustNewConstMetric(c.handshakeQueue, prometheus.GaugeValue, float64(len(c.r.hs.queue)))
	ch <- prometheus.MustNewConstMetric(c.dhOps, prometheus.CounterValue, float64(h.DH))
	ch <- prometheus.MustNewConstMetric(c.cookieReplies, prometheus.CounterValue, float64(h.CookieReplies))
	ch <- prometheus.MustNewConstMetric(c.unreachable, prometheus.GaugeValue, float64(c.r.hs.reach.unreachable.Load()))
	ch <- prometheus.MustNewConstMetric(c.laneStrays, prometheus.CounterValue, float64(c.r.laneStrays()))
	ch <- prometheus.MustNewConstMetric(c.fragMisses, prometheus.CounterValue, float64(c.r.flows.Misses()))
	ch <- prometheus.MustNewConstMetric(c.express, prometheus.CounterValue, float64(c.r.express.count.sent.Load()), "sent")
	ch <- prometheus.MustNewConstMetric(c.express, prometheus.CounterValue, float64(c.r.express.count.received.Load()), "received")
	ch <- prometheus.MustNewConstMetric(c.expressSteered, prometheus.GaugeValue, boolGauge(c.r.express.steered))
	ch <- prometheus.MustNewConstMetric(c.expressRT, prometheus.GaugeValue, float64(c.r.express.realtime.Load()))
	ch <- prometheus.MustNewConstMetric(c.expressSpilled, prometheus.CounterValue, float64(c.r.express.count.spilled.Load()))
	ch <- prometheus.MustNewConstMetric(c.expressPoliced, prometheus.CounterValue, float64(c.r.express.count.policed.Load()))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
