// Package modes starts what carries the benchmark's traffic between the
// two gateways of a lab.Topology: plain kernel forwarding, bridgehead with
// a cipher, or wireguard-go configured with wg.
package modes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/lab"
)

// Mode names as the -modes flag takes them.
const (
	Kernel      = "kernel"
	Bridgehead  = "bridgehead"
	WireguardGo = "wireguard-go"
)

// Variant is one column of the results: a mode, with a cipher for
// bridgehead ("bridgehead-aesgcm").
type Variant struct {
	Mode   string
	Cipher string
	// Lanes is bridgehead's `run --lanes`; 0 leaves the daemon's
	// default (one per CPU).
	Lanes int
	// ExpressPriority is bridgehead's `run --express-priority`:
	// ExpressDefault leaves the daemon's default (10 where the gateway
	// has CAP_BPF and CAP_SYS_NICE, as the bench's root gateways do);
	// 0 turns the express lane off; 1..99 sorts flows in the kernel and
	// runs the express lane's loops SCHED_FIFO at that priority.
	ExpressPriority int
}

// ExpressDefault is the ExpressPriority that passes no
// --express-priority, so the gateway runs with its default.
const ExpressDefault = -1

func (v Variant) String() string {
	s := v.Mode
	if v.Cipher != "" {
		s += "-" + v.Cipher
	}
	if v.Lanes > 0 {
		s += fmt.Sprintf("-lanes%d", v.Lanes)
	}
	switch {
	case v.Mode != Bridgehead || v.ExpressPriority == ExpressDefault:
	case v.ExpressPriority == 0:
		s += "-express-off"
	default:
		s += fmt.Sprintf("-rt%d", v.ExpressPriority)
	}
	return s
}

// Tools names the binaries the modes run.
type Tools struct {
	Bridgehead  string // bin/bridgehead
	WireguardGo string // wireguard-go (installed by `go install` as "wireguard")
	Wg          string // wg from wireguard-tools
	Iperf3      string
}

// Gateways is what a started mode hands back: the gateway processes (none
// for kernel forwarding).
type Gateways struct {
	A, B *lab.Proc
}

// Start configures the gateways of t for v and starts their processes.
func Start(ctx context.Context, t *lab.Topology, v Variant, tools Tools, tunMTU int) (Gateways, error) {
	switch v.Mode {
	case Kernel:
		return Gateways{}, startKernel(ctx, t)
	case Bridgehead:
		return startBridgehead(ctx, t, tools.Bridgehead, v, tunMTU)
	case WireguardGo:
		return startWireguardGo(ctx, t, tools, tunMTU)
	}
	return Gateways{}, fmt.Errorf("unknown mode %q", v.Mode)
}

// startKernel: plain IP forwarding between the gateways, no tunnel. Each
// gateway routes the other site's prefixes via the other's WAN address.
func startKernel(ctx context.Context, t *lab.Topology) error {
	if err := t.ForwardAndPodRoutes(ctx); err != nil {
		return err
	}
	for _, p := range lab.SitePrefixes4("b") {
		if err := t.IP(ctx, "-n", t.NS(lab.AGW), "route", "replace", p, "via", lab.WANB); err != nil {
			return err
		}
	}
	for _, p := range lab.SitePrefixes4("a") {
		if err := t.IP(ctx, "-n", t.NS(lab.BGW), "route", "replace", p, "via", lab.WANA); err != nil {
			return err
		}
	}
	return nil
}

// startBridgehead writes keys and configs the way deploy/lab/lab.sh does
// and runs `bridgehead run` in each gateway namespace.
func startBridgehead(ctx context.Context, t *lab.Topology, bin string, v Variant, tunMTU int) (Gateways, error) {
	var pub [2]string
	for i, s := range []string{"a", "b"} {
		key, err := t.Run(ctx, bin, "genkey")
		if err != nil {
			return Gateways{}, err
		}
		keyPath := filepath.Join(t.Dir, s+".key")
		if err := os.WriteFile(keyPath, []byte(key), 0o600); err != nil {
			return Gateways{}, err
		}
		t.AddCleanup(func() { os.Remove(keyPath) })
		p, err := t.RunStdin(ctx, key, bin, "pubkey")
		if err != nil {
			return Gateways{}, err
		}
		pub[i] = strings.TrimSpace(p)
	}
	for _, s := range []string{"a", "b"} {
		cfg := BridgeheadConfig(s, filepath.Join(t.Dir, s+".key"), v.Cipher, tunMTU, pub[0], pub[1])
		path := filepath.Join(t.Dir, s+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			return Gateways{}, err
		}
		if _, err := t.Run(ctx, bin, "check", "--config", path); err != nil {
			return Gateways{}, err
		}
	}
	var gw Gateways
	var err error
	args := func(site string) []string {
		a := []string{bin, "run", "--config", filepath.Join(t.Dir, site+".yaml")}
		if v.Lanes > 0 {
			a = append(a, "--lanes", fmt.Sprint(v.Lanes))
		}
		if v.ExpressPriority != ExpressDefault {
			a = append(a, "--express-priority", fmt.Sprint(v.ExpressPriority))
		}
		return a
	}
	if gw.A, err = t.Start("gw-a", lab.AGW, nil, args("a")...); err != nil {
		return gw, err
	}
	if gw.B, err = t.Start("gw-b", lab.BGW, nil, args("b")...); err != nil {
		return gw, err
	}
	// Up when the daemon has installed its routes on bh0, as lab.sh waits.
	for _, x := range []struct {
		role string
		p    *lab.Proc
	}{{lab.AGW, gw.A}, {lab.BGW, gw.B}} {
		if err := lab.WaitFor(ctx, 15*time.Second, func() (bool, error) {
			if done, perr := x.p.Exited(); done {
				return false, fmt.Errorf("%s exited: %v\n%s", x.p.Name, perr, x.p.LogTail())
			}
			out, _ := t.Run(ctx, "ip", "-n", t.NS(x.role), "route", "show", "dev", "bh0")
			return strings.TrimSpace(out) != "", nil
		}); err != nil {
			return gw, fmt.Errorf("%s did not come up: %w\n%s", x.p.Name, err, x.p.LogTail())
		}
	}
	return gw, nil
}

// BridgeheadConfig is the config of gateway s ("a" or "b") of the
// benchmark's two sites, in the format and address plan of lab.sh.
func BridgeheadConfig(s, keyPath, cipher string, tunMTU int, pubA, pubB string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "site: site-%s\ngateway: gw-%s1\nprivateKeyFile: %s\nlisten: 0.0.0.0:51820\ncipher: %s\n", s, s, keyPath, cipher)
	// Both gateways share this machine's filesystem: give each its own
	// control socket next to its key.
	fmt.Fprintf(&b, "controlSocket: %s\n", filepath.Join(filepath.Dir(keyPath), s+".sock"))
	fmt.Fprintf(&b, "interface:\n  name: bh0\n  mtu: %d\nmetrics:\n  listen: %s\n", tunMTU, metricsListen)
	fmt.Fprintf(&b, `sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16, fd00:224::/64]
    podCIDRs: [10.244.0.0/16, fd00:244::/56]
    gateways:
      - name: gw-a1
        address: 10.224.0.4
        address6: fd00:224::4
        endpoint: 203.0.113.1:51820
        publicKey: %s
    nodes:
      - {name: node-a1, address: 10.224.0.5, podCIDR: 10.244.1.0/24, address6: fd00:224::5, podCIDR6: fd00:244:0:1::/64}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24, fd00:50::/64]
    podCIDRs: [10.245.0.0/16, fd00:245::/56]
    gateways:
      - name: gw-b1
        address: 192.168.50.2
        address6: fd00:50::2
        endpoint: 203.0.113.2:51820
        publicKey: %s
    nodes:
      - {name: node-b1, address: 192.168.50.5, podCIDR: 10.245.1.0/24, address6: fd00:50::5, podCIDR6: fd00:245:0:1::/64}
`, pubA, pubB)
	return b.String()
}

// startWireguardGo runs wireguard-go in each gateway namespace and
// configures it with wg: the peer is the other gateway at its WAN address,
// allowed-ips the other site's prefixes, and those prefixes are routed
// into the wg interface.
//
// wireguard-go keeps its control socket at /var/run/wireguard/IFNAME.sock,
// and `ip netns exec` shares /var/run with the host, so two gateways (and
// two concurrent benchmarks) need different interface names: they are
// named after the namespace prefix. The -f flag keeps wireguard-go in the
// foreground so that Down stops it by its PID.
func startWireguardGo(ctx context.Context, t *lab.Topology, tools Tools, tunMTU int) (Gateways, error) {
	if err := t.ForwardAndPodRoutes(ctx); err != nil {
		return Gateways{}, err
	}
	ifname := map[string]string{lab.AGW: wgIfname(t.Prefix, "a"), lab.BGW: wgIfname(t.Prefix, "b")}
	var priv, pub [2]string
	for i := range 2 {
		k, err := t.Run(ctx, tools.Wg, "genkey")
		if err != nil {
			return Gateways{}, err
		}
		priv[i] = filepath.Join(t.Dir, fmt.Sprintf("wg%d.key", i))
		if err := os.WriteFile(priv[i], []byte(k), 0o600); err != nil {
			return Gateways{}, err
		}
		path := priv[i]
		t.AddCleanup(func() { os.Remove(path) })
		p, err := t.RunStdin(ctx, k, tools.Wg, "pubkey")
		if err != nil {
			return Gateways{}, err
		}
		pub[i] = strings.TrimSpace(p)
	}
	var gw Gateways
	type side struct {
		role, name, peerEndpoint, priv, peerPub string
		remote                                  []string
		p                                       **lab.Proc
	}
	sides := []side{
		{lab.AGW, "wg-a", lab.WANB + ":51820", priv[0], pub[1], lab.SitePrefixes("b"), &gw.A},
		{lab.BGW, "wg-b", lab.WANA + ":51820", priv[1], pub[0], lab.SitePrefixes("a"), &gw.B},
	}
	for _, s := range sides {
		dev := ifname[s.role]
		sock := "/var/run/wireguard/" + dev + ".sock"
		// A socket left by a SIGKILLed wireguard-go of ours.
		t.AddCleanup(func() { os.Remove(sock) })
		p, err := t.Start(s.name, s.role, []string{"WG_PROCESS_FOREGROUND=1"}, tools.WireguardGo, "-f", dev)
		if err != nil {
			return gw, err
		}
		*s.p = p
		if err := lab.WaitFor(ctx, 10*time.Second, func() (bool, error) {
			if done, perr := p.Exited(); done {
				return false, fmt.Errorf("%s exited: %v\n%s", p.Name, perr, p.LogTail())
			}
			_, err := os.Stat(sock)
			return err == nil, nil
		}); err != nil {
			return gw, fmt.Errorf("%s: no control socket %s: %w", s.name, sock, err)
		}
		if _, err := t.Exec(ctx, s.role, tools.Wg, "set", dev, "listen-port", "51820", "private-key", s.priv,
			"peer", s.peerPub, "endpoint", s.peerEndpoint, "allowed-ips", strings.Join(s.remote, ",")); err != nil {
			return gw, err
		}
		if err := t.IP(ctx, "-n", t.NS(s.role), "link", "set", dev, "mtu", fmt.Sprint(tunMTU), "up"); err != nil {
			return gw, err
		}
		for _, pfx := range s.remote {
			if err := t.IP(ctx, "-n", t.NS(s.role), "route", "replace", pfx, "dev", dev); err != nil {
				return gw, err
			}
		}
	}
	return gw, nil
}

// wgIfname is a wireguard-go interface name unique to a topology prefix,
// at most 15 bytes.
func wgIfname(prefix, side string) string {
	n := "wg" + strings.TrimPrefix(prefix, "bhb")
	if len(n) > 14 {
		n = n[len(n)-14:]
	}
	return n + side
}
