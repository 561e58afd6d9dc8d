package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Mode names as the -modes flag takes them.
const (
	ModeKernel      = "kernel"
	ModeBridgehead  = "bridgehead"
	ModeWireguardGo = "wireguard-go"
)

// Variant is one column of the results: a mode, with a cipher for
// bridgehead ("bridgehead-aesgcm").
type Variant struct {
	Mode   string
	Cipher string
}

func (v Variant) String() string {
	if v.Cipher != "" {
		return v.Mode + "-" + v.Cipher
	}
	return v.Mode
}

// Tools names the binaries the modes run.
type Tools struct {
	Bridgehead  string // bin/bridgehead
	WireguardGo string // wireguard-go (installed by `go install` as "wireguard")
	Wg          string // wg from wireguard-tools
	Iperf3      string
}

// gateways is what a started mode hands back: the gateway processes (none
// for kernel forwarding).
type gateways struct {
	A, B *Proc
}

// startMode configures the gateways of t for v and starts their processes.
func startMode(ctx context.Context, t *Topology, v Variant, tools Tools, tunMTU int) (gateways, error) {
	switch v.Mode {
	case ModeKernel:
		return gateways{}, startKernel(ctx, t)
	case ModeBridgehead:
		return startBridgehead(ctx, t, tools.Bridgehead, v.Cipher, tunMTU)
	case ModeWireguardGo:
		return startWireguardGo(ctx, t, tools, tunMTU)
	}
	return gateways{}, fmt.Errorf("unknown mode %q", v.Mode)
}

// startKernel: plain IP forwarding between the gateways, no tunnel. Each
// gateway routes the other site's prefixes via the other's WAN address.
func startKernel(ctx context.Context, t *Topology) error {
	if err := t.forwardAndPodRoutes(ctx); err != nil {
		return err
	}
	for _, p := range siteBPrefixes4 {
		if err := t.ip(ctx, "-n", t.NS(AGW), "route", "replace", p, "via", wanB); err != nil {
			return err
		}
	}
	for _, p := range siteAPrefixes4 {
		if err := t.ip(ctx, "-n", t.NS(BGW), "route", "replace", p, "via", wanA); err != nil {
			return err
		}
	}
	return nil
}

// startBridgehead writes keys and configs the way deploy/lab/lab.sh does
// and runs `bridgehead run` in each gateway namespace.
func startBridgehead(ctx context.Context, t *Topology, bin, cipher string, tunMTU int) (gateways, error) {
	var pub [2]string
	for i, s := range []string{"a", "b"} {
		key, err := t.run(ctx, bin, "genkey")
		if err != nil {
			return gateways{}, err
		}
		keyPath := filepath.Join(t.Dir, s+".key")
		if err := os.WriteFile(keyPath, []byte(key), 0o600); err != nil {
			return gateways{}, err
		}
		t.cleanups = append(t.cleanups, func() { os.Remove(keyPath) })
		p, err := t.runStdin(ctx, key, bin, "pubkey")
		if err != nil {
			return gateways{}, err
		}
		pub[i] = strings.TrimSpace(p)
	}
	for _, s := range []string{"a", "b"} {
		cfg := BridgeheadConfig(s, filepath.Join(t.Dir, s+".key"), cipher, tunMTU, pub[0], pub[1])
		path := filepath.Join(t.Dir, s+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			return gateways{}, err
		}
		if _, err := t.run(ctx, bin, "check", "--config", path); err != nil {
			return gateways{}, err
		}
	}
	var gw gateways
	var err error
	if gw.A, err = t.Start("gw-a", AGW, nil, bin, "run", "--config", filepath.Join(t.Dir, "a.yaml")); err != nil {
		return gw, err
	}
	if gw.B, err = t.Start("gw-b", BGW, nil, bin, "run", "--config", filepath.Join(t.Dir, "b.yaml")); err != nil {
		return gw, err
	}
	// Up when the daemon has installed its routes on bh0, as lab.sh waits.
	for _, x := range []struct {
		role string
		p    *Proc
	}{{AGW, gw.A}, {BGW, gw.B}} {
		if err := waitFor(ctx, 15*time.Second, func() (bool, error) {
			if done, perr := x.p.Exited(); done {
				return false, fmt.Errorf("%s exited: %v\n%s", x.p.Name, perr, x.p.LogTail())
			}
			out, _ := t.run(ctx, "ip", "-n", t.NS(x.role), "route", "show", "dev", "bh0")
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
	fmt.Fprintf(&b, "interface:\n  name: bh0\n  mtu: %d\nmetrics:\n  listen: 127.0.0.1:9641\n", tunMTU)
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
func startWireguardGo(ctx context.Context, t *Topology, tools Tools, tunMTU int) (gateways, error) {
	if err := t.forwardAndPodRoutes(ctx); err != nil {
		return gateways{}, err
	}
	ifname := map[string]string{AGW: wgIfname(t.Prefix, "a"), BGW: wgIfname(t.Prefix, "b")}
	var priv, pub [2]string
	for i := range 2 {
		k, err := t.run(ctx, tools.Wg, "genkey")
		if err != nil {
			return gateways{}, err
		}
		priv[i] = filepath.Join(t.Dir, fmt.Sprintf("wg%d.key", i))
		if err := os.WriteFile(priv[i], []byte(k), 0o600); err != nil {
			return gateways{}, err
		}
		path := priv[i]
		t.cleanups = append(t.cleanups, func() { os.Remove(path) })
		p, err := t.runStdin(ctx, k, tools.Wg, "pubkey")
		if err != nil {
			return gateways{}, err
		}
		pub[i] = strings.TrimSpace(p)
	}
	var gw gateways
	type side struct {
		role, name, peerEndpoint, priv, peerPub string
		remote                                  []string
		p                                       **Proc
	}
	sides := []side{
		{AGW, "wg-a", wanB + ":51820", priv[0], pub[1], append(append([]string{}, siteBPrefixes4...), siteBPrefixes6...), &gw.A},
		{BGW, "wg-b", wanA + ":51820", priv[1], pub[0], append(append([]string{}, siteAPrefixes4...), siteAPrefixes6...), &gw.B},
	}
	for _, s := range sides {
		dev := ifname[s.role]
		sock := "/var/run/wireguard/" + dev + ".sock"
		// A socket left by a SIGKILLed wireguard-go of ours.
		t.cleanups = append(t.cleanups, func() { os.Remove(sock) })
		p, err := t.Start(s.name, s.role, []string{"WG_PROCESS_FOREGROUND=1"}, tools.WireguardGo, "-f", dev)
		if err != nil {
			return gw, err
		}
		*s.p = p
		if err := waitFor(ctx, 10*time.Second, func() (bool, error) {
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
		if err := t.ip(ctx, "-n", t.NS(s.role), "link", "set", dev, "mtu", fmt.Sprint(tunMTU), "up"); err != nil {
			return gw, err
		}
		for _, pfx := range s.remote {
			if err := t.ip(ctx, "-n", t.NS(s.role), "route", "replace", pfx, "dev", dev); err != nil {
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

// runStdin is run with stdin.
func (t *Topology) runStdin(ctx context.Context, stdin, name string, args ...string) (string, error) {
	if t.Log != nil {
		fmt.Fprintf(t.Log, "    $ %s %s < ...\n", name, strings.Join(args, " "))
	}
	c := execCommand(ctx, name, args...)
	c.Stdin = strings.NewReader(stdin)
	out, err := c.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// waitFor polls cond every 100 ms until it is true, returns an error, or
// limit passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
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
