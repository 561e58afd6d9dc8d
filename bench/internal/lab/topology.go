// Package lab builds the benchmark's network: pod A — gateway A — WAN —
// gateway B — pod B in network namespaces named PREFIX-ROLE, with the
// address plan of deploy/lab/lab.sh, and optionally a fifth namespace to
// flood gateway B from. It starts and stops the processes that run in it
// (each stopped by its PID, each namespace deleted by its name) and enters
// its namespaces for the harness's own sockets.
package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The address plan is the one of deploy/lab/lab.sh, so that a bridgehead
// config written for the benchmark reads like the lab's.
var (
	PodA = netip.MustParseAddr("10.244.1.10")
	PodB = netip.MustParseAddr("10.245.1.10")
	// PodA2 and PodB2 are second pods on the same nodes (addresses on
	// the node namespaces' lo, like PodA and PodB): the small flows that
	// are measured while PodA and PodB carry a bulk one.
	PodA2   = netip.MustParseAddr("10.244.1.11")
	PodB2   = netip.MustParseAddr("10.245.1.11")
	nodeA   = "10.224.0.5"
	nodeB   = "192.168.50.5"
	gwALAN  = "10.224.0.4"
	gwBLAN  = "192.168.50.2"
	gwALAN6 = "fd00:224::4"
	gwBLAN6 = "fd00:50::2"
	// WANA and WANB are the gateways' WAN addresses.
	WANA = "203.0.113.1"
	WANB = "203.0.113.2"

	// Prefixes of each site: what the other site routes toward it. Never
	// written; other packages get copies from SitePrefixes4 and
	// SitePrefixes.
	siteAPrefixes4 = []string{"10.224.0.0/16", "10.244.0.0/16"}
	siteBPrefixes4 = []string{"192.168.50.0/24", "10.245.0.0/16"}
	siteAPrefixes6 = []string{"fd00:224::/64", "fd00:244::/56"}
	siteBPrefixes6 = []string{"fd00:50::/64", "fd00:245::/56"}
)

// SitePrefixes4 is the IPv4 prefixes of site "a" or "b" (node and pod
// ranges): what the other site routes toward it.
func SitePrefixes4(site string) []string {
	if site == "a" {
		return slices.Clone(siteAPrefixes4)
	}
	return slices.Clone(siteBPrefixes4)
}

// SitePrefixes is the IPv4 and then the IPv6 prefixes of site "a" or "b".
func SitePrefixes(site string) []string {
	if site == "a" {
		return slices.Concat(siteAPrefixes4, siteAPrefixes6)
	}
	return slices.Concat(siteBPrefixes4, siteBPrefixes6)
}

// Namespace roles of a topology.
const (
	ANode = "a-node"
	AGW   = "a-gw"
	BGW   = "b-gw"
	BNode = "b-node"
)

var roles = []string{ANode, AGW, BGW, BNode}

// Flood is the role of the fifth namespace of a flood measurement (see
// Topology.Flood).
const Flood = "flood"

// The flood link: a veth of its own between gateway B ("flood") and the
// flood namespace ("eth0"), a /30 from TEST-NET-2. The flooder routes
// gateway B's WAN address over it, so it hits the very address and port
// gateway A talks to.
var (
	floodGW = "198.51.100.1"
	// FloodSrc is the flooder's address.
	FloodSrc = "198.51.100.2"
)

// Topology is pod A — gateway A — WAN — gateway B — pod B in four network
// namespaces named PREFIX-ROLE. The pods hold one static route per remote
// prefix toward their gateway and keep MTU 1500; the gateways have no
// route to the other site until a mode adds one.
type Topology struct {
	Prefix string
	WANMTU int
	// Dir holds configs, keys and logs of what runs in the topology.
	Dir string
	// Log, when set, receives every command run.
	Log io.Writer
	// Flood adds a fifth namespace, PREFIX-flood, linked to gateway B by
	// a veth of its own, from which gateway B's WAN address is reachable.
	Flood bool

	created []string
	procs   []*Proc
	// cleanups run in reverse order after the processes are stopped and
	// before the namespaces are deleted.
	cleanups []func()
}

// AddCleanup registers f to run in Down, after the processes are stopped
// and before the namespaces are deleted (a key file, a control socket).
// Cleanups run in reverse order of registration.
func (t *Topology) AddCleanup(f func()) { t.cleanups = append(t.cleanups, f) }

// NS is the name of a role's namespace.
func (t *Topology) NS(role string) string { return t.Prefix + "-" + role }

// Namespaces lists the namespaces Up created.
func (t *Topology) Namespaces() []string { return append([]string(nil), t.created...) }

// Run runs a command and returns its combined output, with the output in
// the error when it fails.
func (t *Topology) Run(ctx context.Context, name string, args ...string) (string, error) {
	if t.Log != nil {
		fmt.Fprintf(t.Log, "    $ %s %s\n", name, strings.Join(args, " "))
	}
	var out bytes.Buffer
	c := exec.CommandContext(ctx, name, args...)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// IP runs `ip ARGS...`.
func (t *Topology) IP(ctx context.Context, args ...string) error {
	_, err := t.Run(ctx, "ip", args...)
	return err
}

// Exec runs a command in a role's namespace.
func (t *Topology) Exec(ctx context.Context, role string, args ...string) (string, error) {
	return t.Run(ctx, "ip", append([]string{"netns", "exec", t.NS(role)}, args...)...)
}

// Up creates the namespaces and links. On error the caller still calls
// Down, which removes whatever was made.
func (t *Topology) Up(ctx context.Context) error {
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return err
	}
	wanMTU := t.WANMTU
	if wanMTU == 0 {
		wanMTU = 1500
	}
	all := roles
	if t.Flood {
		all = append(append([]string{}, roles...), Flood)
	}
	for _, r := range all {
		ns := t.NS(r)
		// A namespace of ours left by a killed run with a recycled PID.
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.IP(ctx, "netns", "del", ns)
		}
		if err := t.IP(ctx, "netns", "add", ns); err != nil {
			return err
		}
		t.created = append(t.created, ns)
		if err := t.IP(ctx, "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
		if _, err := t.Exec(ctx, r, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"); err != nil {
			return err
		}
	}
	a, b, ga, gb := t.NS(ANode), t.NS(BNode), t.NS(AGW), t.NS(BGW)
	cmds := labLinks(a, b, ga, gb, wanMTU)
	cmds = append(cmds,
		[]string{"-n", a, "addr", "add", PodA2.String() + "/32", "dev", "lo"},
		[]string{"-n", b, "addr", "add", PodB2.String() + "/32", "dev", "lo"})
	// Pods: only static routes toward their own gateway, the routes
	// `bridgehead routes --format ip` prints for the lab.
	for _, p := range siteBPrefixes4 {
		cmds = append(cmds, []string{"-n", a, "route", "replace", p, "via", gwALAN})
	}
	for _, p := range siteBPrefixes6 {
		cmds = append(cmds, []string{"-n", a, "-6", "route", "replace", p, "via", gwALAN6})
	}
	for _, p := range siteAPrefixes4 {
		cmds = append(cmds, []string{"-n", b, "route", "replace", p, "via", gwBLAN})
	}
	for _, p := range siteAPrefixes6 {
		cmds = append(cmds, []string{"-n", b, "-6", "route", "replace", p, "via", gwBLAN6})
	}
	if t.Flood {
		f := t.NS(Flood)
		cmds = append(cmds,
			[]string{"-n", gb, "link", "add", "flood", "type", "veth", "peer", "name", "eth0", "netns", f},
			[]string{"-n", gb, "addr", "add", floodGW + "/30", "dev", "flood"},
			[]string{"-n", f, "addr", "add", FloodSrc + "/30", "dev", "eth0"},
			[]string{"-n", gb, "link", "set", "flood", "up"},
			[]string{"-n", f, "link", "set", "eth0", "up"},
			[]string{"-n", f, "route", "replace", WANB + "/32", "via", floodGW},
		)
	}
	for _, c := range cmds {
		if err := t.IP(ctx, c...); err != nil {
			return err
		}
	}
	return nil
}

// ForwardAndPodRoutes prepares the gateways for modes where the kernel
// forwards (kernel, wireguard-go): IP forwarding on, and a route to each
// local node's pod range via the node (bridgehead installs these itself
// from its config's node list).
func (t *Topology) ForwardAndPodRoutes(ctx context.Context) error {
	for _, gw := range []string{AGW, BGW} {
		if _, err := t.Exec(ctx, gw, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
			return err
		}
	}
	if err := t.IP(ctx, "-n", t.NS(AGW), "route", "replace", "10.244.1.0/24", "via", nodeA); err != nil {
		return err
	}
	if err := t.IP(ctx, "-n", t.NS(AGW), "-6", "route", "replace", "fd00:244:0:1::/64", "via", "fd00:224::5"); err != nil {
		return err
	}
	if err := t.IP(ctx, "-n", t.NS(BGW), "route", "replace", "10.245.1.0/24", "via", nodeB); err != nil {
		return err
	}
	return t.IP(ctx, "-n", t.NS(BGW), "-6", "route", "replace", "fd00:245:0:1::/64", "via", "fd00:50::5")
}

// Proc is a long-running process started in a namespace.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
	err  error
}

// PID is the process id (`ip netns exec` execs the command, so it is the
// command's own).
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Exited reports whether the process has ended, and its error.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// LogTail is the last lines of the process's log.
func (p *Proc) LogTail() string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// Start starts a long-running command in a role's namespace, its output to
// DIR/NAME.log. Down stops it.
func (t *Topology) Start(name, role string, env []string, args ...string) (*Proc, error) {
	logPath := filepath.Join(t.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	full := append([]string{"netns", "exec", t.NS(role)}, args...)
	if t.Log != nil {
		fmt.Fprintf(t.Log, "    $ ip %s &  (log %s)\n", strings.Join(full, " "), logPath)
	}
	c := exec.Command("ip", full...)
	c.Stdout, c.Stderr = f, f
	c.Env = append(os.Environ(), env...)
	if err := c.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Name: name, Cmd: c, Log: logPath, done: make(chan struct{})}
	go func() { p.err = c.Wait(); close(p.done) }()
	t.procs = append(t.procs, p)
	return p, nil
}

// Down stops every process Start started (SIGTERM, then SIGKILL after 5
// s), runs the registered cleanups and deletes the namespaces Up made, each
// by its exact PID or name. It is safe to call more than once.
func (t *Topology) Down() error {
	var errs []error
	for _, p := range t.procs {
		if done, _ := p.Exited(); done {
			continue
		}
		p.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range t.procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.Cmd.Process.Kill()
			<-p.done
		}
	}
	t.procs = nil
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ns := range t.created {
		if err := t.IP(ctx, "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	t.created = nil
	return errors.Join(errs...)
}

// labLinks returns the ip(8) arguments that wire the lab's links and
// addresses for the namespaces of node A, node B, gateway A and gateway B:
// the same links and addresses as deploy/lab/lab.sh (TestLabPlanMatches
// compares them).
func labLinks(a, b, ga, gb string, wanMTU int) [][]string {
	cmds := [][]string{
		{"-n", ga, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", a},
		{"-n", gb, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", b},
		{"-n", ga, "link", "add", "wan", "type", "veth", "peer", "name", "wan", "netns", gb},
		{"-n", ga, "link", "set", "wan", "mtu", fmt.Sprint(wanMTU)},
		{"-n", gb, "link", "set", "wan", "mtu", fmt.Sprint(wanMTU)},
	}
	cmds = append(cmds, labSite(ga, a, gwALAN+"/16", gwALAN6+"/64", nodeA+"/16", "fd00:224::5/64", PodA.String()+"/32", "fd00:244:0:1::10/128")...)
	cmds = append(cmds, labSite(gb, b, gwBLAN+"/24", gwBLAN6+"/64", nodeB+"/24", "fd00:50::5/64", PodB.String()+"/32", "fd00:245:0:1::10/128")...)
	return append(cmds,
		// WAN
		[]string{"-n", ga, "addr", "add", WANA + "/24", "dev", "wan"},
		[]string{"-n", gb, "addr", "add", WANB + "/24", "dev", "wan"},
		[]string{"-n", ga, "link", "set", "lan", "up"},
		[]string{"-n", ga, "link", "set", "wan", "up"},
		[]string{"-n", gb, "link", "set", "lan", "up"},
		[]string{"-n", gb, "link", "set", "wan", "up"},
		[]string{"-n", a, "link", "set", "eth0", "up"},
		[]string{"-n", b, "link", "set", "eth0", "up"},
	)
}

// labSite is deploy/lab/lib.sh's lab_site: a site's gateway addresses
// on its lan, its node's on eth0 and the node's pod addresses on lo.
func labSite(gw, node, gw4, gw6, node4, node6, pod4, pod6 string) [][]string {
	return [][]string{
		{"-n", gw, "addr", "add", gw4, "dev", "lan"},
		{"-n", gw, "addr", "add", gw6, "dev", "lan", "nodad"},
		{"-n", node, "addr", "add", node4, "dev", "eth0"},
		{"-n", node, "addr", "add", node6, "dev", "eth0", "nodad"},
		{"-n", node, "addr", "add", pod4, "dev", "lo"},
		{"-n", node, "addr", "add", pod6, "dev", "lo"},
	}
}

// RunStdin is Run with stdin.
func (t *Topology) RunStdin(ctx context.Context, stdin, name string, args ...string) (string, error) {
	if t.Log != nil {
		fmt.Fprintf(t.Log, "    $ %s %s < ...\n", name, strings.Join(args, " "))
	}
	c := exec.CommandContext(ctx, name, args...)
	c.Stdin = strings.NewReader(stdin)
	out, err := c.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// WaitFor polls cond every 100 ms until it is true, returns an error, or
// limit passes.
func WaitFor(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
