// Package verify is `bridgehead verify`: the checks an operator runs on
// a gateway after installing it and whenever callbacks or pod traffic
// misbehave. Each check measures something from the gateway's side —
// the running daemon (through its control socket), the sessions and the
// round trip to every remote gateway through the tunnel, ICMP and a TCP
// connect to the kubelet port of remote nodes, the path MTU through the
// tunnel, the kernel's routes and forwarding switches, the CONNECT relay
// — and reports PASS, FAIL or SKIP with the figure it measured. Every
// FAIL says what to look at.
//
// RunCluster (verify --on node|pod) does the checks seed 003 asks an
// operator to make from a node or a pod of a site: pods in the other
// sites through the gateways and in its own site directly (with the path
// MTU), a Service ClusterIP, the cluster DNS, egress to an outside
// address, and the callback path through a relay to this node's kubelet.
//
// A check that needs one that failed SKIPs and names it, so one cause
// gives one FAIL: everything on a gateway needs its daemon; the checks
// through a remote site need a gateway of that site (gateway mode) or a
// pod there that answered (node and pod mode).
//
// Run and RunCluster do the checks one after another on the calling
// goroutine; the Network they are given does the I/O, so tests can
// replace it.
package verify

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/control"
)

// Result of one check.
type Result string

const (
	Pass Result = "PASS"
	Fail Result = "FAIL"
	Skip Result = "SKIP"
)

// Check is one line of the report.
type Check struct {
	Name   string `json:"check"`
	Target string `json:"target"`
	Result Result `json:"result"`
	// Figure is what was measured ("rtt 0.41 ms", "1420 bytes").
	Figure string `json:"figure"`
	// Detail says, for a FAIL, what to look at; for a SKIP, why.
	Detail string `json:"detail,omitempty"`
}

// Options are what Run checks and with what.
type Options struct {
	Config *config.Config
	// Status reads the running gateway's status (control.Fetch).
	Status func(ctx context.Context) (*control.Status, error)
	Net    Network
	// Timeout is how long each probe waits for an answer.
	Timeout time.Duration
	// Targets replace the remote nodes listed in the config.
	Targets []netip.Addr
	// Port is the TCP port probed on nodes (the kubelet's, 10250).
	Port uint16
	// RelayClient is the TLS client config for a relay with mTLS (with
	// a client certificate); nil skips the relay check for such a relay.
	RelayClient *tls.Config
}

// Report is every check in order.
type Report struct {
	Checks []Check `json:"checks"`
	Passed int     `json:"passed"`
	Failed int     `json:"failed"`
	Skip   int     `json:"skipped"`
}

// OK reports whether no check failed.
func (r *Report) OK() bool { return r.Failed == 0 }

func (r *Report) add(c Check) {
	r.Checks = append(r.Checks, c)
	switch c.Result {
	case Pass:
		r.Passed++
	case Fail:
		r.Failed++
	default:
		r.Skip++
	}
}

// Run performs every check and returns the report.
func Run(ctx context.Context, o Options) *Report {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Port == 0 {
		o.Port = 10250
	}
	v := &run{o: o, rep: &Report{}}
	v.gateway(ctx)
	v.remoteGateways(ctx)
	v.nodes(ctx)
	v.pathMTU(ctx)
	v.routes()
	v.forwarding()
	v.relay(ctx)
	return v.rep
}

// run is the state of one Run.
type run struct {
	o      Options
	rep    *Report
	status *control.Status // nil when the daemon could not be reached
	// daemonDown is set when the gateway check could not reach the
	// daemon: every later check needs it (its TUN, routes, sysctls,
	// relay) and SKIPs naming it.
	daemonDown *prereq
	// gwDown holds, by "site/gateway", the remote gateways whose check
	// failed; siteDown, by site, the sites none of whose gateways
	// answered. Checks through them SKIP naming them.
	gwDown   map[string]*prereq
	siteDown map[string]*prereq
}

// prereq is a failed check that later checks depend on.
type prereq struct{ check, target string }

// skip turns chk into a SKIP that names the failed prerequisite, so one
// cause gives one FAIL.
func (p *prereq) skip(chk Check) Check {
	chk.Result, chk.Figure = Skip, ""
	chk.Detail = fmt.Sprintf("not checked: needs %s %s, which failed above", p.check, p.target)
	return chk
}

// WriteTable prints the report as a table, a "->" line under every FAIL
// and SKIP saying why, and a summary.
func (r *Report) WriteTable(w io.Writer) {
	// The rows are aligned on their own; the "->" lines go between
	// them without widening any column.
	var rows strings.Builder
	tw := tabwriter.NewWriter(&rows, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tCHECK\tTARGET\tMEASURED")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Result, c.Name, c.Target, orDash(c.Figure))
	}
	tw.Flush()
	lines := strings.Split(strings.TrimSuffix(rows.String(), "\n"), "\n")
	fmt.Fprintln(w, lines[0])
	for i, c := range r.Checks {
		fmt.Fprintln(w, lines[i+1])
		if c.Detail != "" {
			fmt.Fprintf(w, "        -> %s\n", c.Detail)
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped\n", r.Passed, r.Failed, r.Skip)
}

// WriteJSON prints the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}
