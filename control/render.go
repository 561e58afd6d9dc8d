package control

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/relay"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/transit"
)

// Render writes s as the human table of `bridgehead status`: a header
// with version, identity, config and readiness, one line per remote
// gateway (its liveness state and since when, how often it went down,
// the last probe round trip along that path, and the packets sent to it, which is the
// share of flows it carries), then the nonzero drop counters. Ages are
// relative to now.
func Render(w io.Writer, s *Status, now time.Time) {
	fmt.Fprintf(w, "bridgehead %s, site %s, gateway %s\n", orDash(s.Version), orDash(s.Site), orDash(s.Gateway))
	fmt.Fprintf(w, "config:  %s (hash %s), loaded %s\n", orDash(s.ConfigPath), orDash(s.ConfigHash), ago(s.ConfigLoaded, now))
	fmt.Fprintf(w, "started: %s\n", ago(s.Started, now))
	if s.LAN != "" {
		fmt.Fprintf(w, "ready:   NO, cannot deliver to this site (/readyz 503, remote gateways move its flows): %s\n", s.LAN)
	}
	switch {
	case s.AllSites && s.LAN != "":
		// The line above says it all.
	case s.AllSites:
		fmt.Fprintf(w, "ready:   yes, %s\n", plural(len(s.Sites), "remote site"))
	default:
		notReady := 0
		for _, site := range s.Sites {
			if !site.Ready {
				notReady++
			}
		}
		lb := "still ready for a load balancer: it reaches another site"
		switch {
		case s.LAN != "":
			lb = "not ready for the reason above"
		case !s.Ready:
			lb = "not ready (/readyz 503): it reaches no remote site"
		}
		fmt.Fprintf(w, "ready:   NO, %d of %s not reachable; %s\n", notReady, plural(len(s.Sites), "remote site"), lb)
		for _, site := range s.Sites {
			if !site.Ready {
				fmt.Fprintf(w, "  site %s: %s\n", site.Site, site.Reason)
			}
		}
	}

	fmt.Fprintln(w)
	if len(s.Sites) == 0 {
		fmt.Fprintln(w, "no remote sites")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(s.Sites) > 0 {
		fmt.Fprintln(tw, "SITE\tGATEWAY\tENDPOINT\tPATH\tSTATE\tSINCE\tDOWNS\tRTT\tLAST-HANDSHAKE\tLAST-RECEIVE\tRX\tTX\tTX-PKTS")
	}
	for _, site := range s.Sites {
		if len(site.Gateways) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\tno gateways\t-\t-\t-\t-\t-\t-\t-\t-\n", site.Site)
		}
		for _, g := range site.Gateways {
			p := findPeer(s.Peers, site.Site, g.Gateway)
			ep, path := "-", p.PathText()
			_, relayed := transit.PseudoGateway(p.Endpoint)
			switch {
			case relayed && p.Path == "":
				path = "via hub" // a daemon that does not say which
			case !relayed && p.Endpoint.IsValid():
				ep = p.Endpoint.String()
			}
			rtt := "-"
			if p.Live.ProbeRTT > 0 {
				rtt = p.Live.ProbeRTT.Round(10 * time.Microsecond).String()
			}
			state := g.State
			switch {
			case p.Live.State == router.LiveDown && p.Live.Reason != router.DownNone:
				state += " (" + p.Live.Reason.String() + ")"
			case p.Live.MTUDegraded:
				state += fmt.Sprintf(" (MTU-degraded, path MTU %d)", p.Live.PathMTU)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", site.Site, g.Gateway, ep, path, state,
				ago(p.Live.LastChange, now), p.Live.Downs, rtt,
				ago(p.LastHandshake, now), ago(g.LastReceive, now), humanBytes(p.RxBytes), humanBytes(p.TxBytes), p.TxPackets)
		}
	}
	tw.Flush()
	renderRelay(w, s.Relay)

	if len(s.Drops) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "dropped packets:")
	width := 0
	for _, d := range s.Drops {
		width = max(width, len(fmt.Sprint(d.Count)))
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, d := range s.Drops {
		fmt.Fprintf(tw, "  %s\t%s\t%*d\n", d.Direction, d.Reason, width, d.Count)
	}
	tw.Flush()
}

// renderRelay writes the relay's line (nothing when it is off):
// address, transport, ports, open connections by site, totals and the
// refusals by reason.
func renderRelay(w io.Writer, r *relay.Status) {
	if r == nil {
		return
	}
	transport := "plain TCP"
	if r.TLS {
		transport = "mTLS"
	}
	var sites []string
	for _, s := range r.BySite {
		sites = append(sites, fmt.Sprintf("%s %d", s.Site, s.Active))
	}
	open := fmt.Sprintf("%d open", r.Active)
	if len(sites) > 0 {
		open += " (" + strings.Join(sites, ", ") + ")"
	}
	var refused []string
	var n uint64
	for _, x := range r.Refused {
		refused = append(refused, fmt.Sprintf("%s %d", x.Reason, x.Count))
		n += x.Count
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "relay:   %s (%s), ports %v: %s, %d relayed, %d refused", r.Listen, transport, r.AllowedPorts, open, r.Total, n)
	if n > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(refused, ", "))
	}
	fmt.Fprintln(w)
}

// findPeer returns the peer of site and gateway, or a zero PeerState.
func findPeer(peers []health.PeerState, site, gateway string) health.PeerState {
	for _, p := range peers {
		if p.Site == site && p.Gateway == gateway {
			return p
		}
	}
	return health.PeerState{}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// ago formats the time from t to now compactly ("12s ago", "3m4s ago",
// "2h5m ago", "3d4h ago"); "never" for a zero t. Times after now (clock
// steps) read as "0s ago".
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := max(now.Sub(t), 0).Truncate(time.Second)
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm%ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		s = fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		s = fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
	return s + " ago"
}

// humanBytes formats n with binary units: "512 B", "1.5 KiB", "20.0 MiB".
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
