package nodeagent

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Sysctls of br_netfilter (per network namespace since Linux 5.3).
const (
	sysctlBridgeNFIPv4 = "net/bridge/bridge-nf-call-iptables"
	sysctlBridgeNFIPv6 = "net/bridge/bridge-nf-call-ip6tables"
)

// HostNet keeps what pod traffic needs of the host's netfilter and
// reports what it cannot set (see the package doc, "The host's
// netfilter"):
//
//   - EnsureBridgeNetfilter: br_netfilter loaded (modprobe when it is
//     not) and net.bridge.bridge-nf-call-iptables (and -ip6tables for a
//     node with an IPv6 block) set to 1, so a pod's packet to a Service
//     whose endpoint is on the same bridge passes conntrack both ways.
//   - CheckForward: no forward base chain of another table, nor
//     iptables-legacy's FORWARD chain, drops the node's pod traffic
//     (policy drop without a rule that accepts it). It
//     only reports: an accept in the agent's own table cannot overrule a
//     drop in another table's chain, and the agent leaves other owners'
//     tables alone.
//
// Its methods may be called from one goroutine at a time (the agent's
// loop).
type HostNet struct {
	// ns is the namespace to work in (nil: the current one).
	ns *netns.NsHandle
	// dial opens a connection to the namespace's nftables.
	dial func() (*nftables.Conn, error)
	// loadModule loads a kernel module (modprobe).
	loadModule func(name string) error
	// procSys is where the sysctls are ("/proc/sys").
	procSys string
}

// NewHostNet works in ns (nil: the current namespace) and reads its
// nftables through dial.
func NewHostNet(ns *netns.NsHandle, dial func() (*nftables.Conn, error)) *HostNet {
	return &HostNet{ns: ns, dial: dial, loadModule: modprobe, procSys: "/proc/sys"}
}

// modprobe loads a module with the image's modprobe; it needs the host's
// /lib/modules and CAP_SYS_MODULE.
func modprobe(name string) error {
	out, err := exec.Command("modprobe", name).CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("modprobe %s: %w: %s", name, err, msg)
		}
		return fmt.Errorf("modprobe %s: %w", name, err)
	}
	return nil
}

// EnsureBridgeNetfilter loads br_netfilter when its sysctls are missing
// and sets bridge-nf-call-iptables (a node with an IPv4 block) and
// bridge-nf-call-ip6tables (an IPv6 block) to 1. It returns the sysctls
// it changed.
func (h *HostNet) EnsureBridgeNetfilter(d *Desired) ([]string, error) {
	var keys []string
	if d.PodCIDR.IsValid() {
		keys = append(keys, sysctlBridgeNFIPv4)
	}
	if d.PodCIDR6.IsValid() {
		keys = append(keys, sysctlBridgeNFIPv6)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	dir := filepath.Join(h.procSys, "net/bridge")
	loaded := func() (bool, error) {
		var ok bool
		err := h.inNetns(func() error {
			_, err := os.Stat(dir)
			ok = err == nil
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
			return err
		})
		return ok, err
	}
	ok, err := loaded()
	if err != nil {
		return nil, err
	}
	if !ok {
		lerr := h.loadModule("br_netfilter")
		if ok, err = loaded(); err != nil {
			return nil, err
		}
		if !ok {
			if lerr == nil {
				lerr = errors.New("loaded, but " + dir + " did not appear")
			}
			return nil, fmt.Errorf("br_netfilter is not loaded, and the agent could not load it (%v): a pod's traffic to a Service whose endpoint is on the same node fails; load it on the host (modprobe br_netfilter) and list it in /etc/modules-load.d/ so it stays after a reboot", lerr)
		}
	}
	var changed []string
	err = h.inNetns(func() error {
		var errs []error
		for _, k := range keys {
			p := filepath.Join(h.procSys, k)
			v, err := os.ReadFile(p)
			if err != nil {
				errs = append(errs, fmt.Errorf("sysctl %s: %w", sysctlName(k), err))
				continue
			}
			if string(bytes.TrimSpace(v)) == "1" {
				continue
			}
			if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("sysctl %s=1: %w (set it on the host: a pod's traffic to a Service whose endpoint is on the same node fails without it)", sysctlName(k), err))
				continue
			}
			changed = append(changed, sysctlName(k)+"=1")
		}
		return errors.Join(errs...)
	})
	return changed, err
}

// sysctlName is the dotted name of a /proc/sys path.
func sysctlName(k string) string { return strings.ReplaceAll(k, "/", ".") }

// CheckForward reports the forward base chains (hook forward, type
// filter, of the ip, ip6, inet and bridge families) whose policy is drop
// and that accept none of the node's pod traffic: no rule of the chain,
// or of a chain it jumps or goes to, accepts on a source address match
// that covers the node's block, and the same of iptables-legacy's
// FORWARD chains (legacyForward), which nftables does not show. Such a
// chain drops what the node's pods send to other nodes and sites, and,
// with bridge-nf-call-iptables, to each other.
func (h *HostNet) CheckForward(d *Desired) error {
	c, err := h.dial()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	chains, err := c.ListChains()
	if err != nil {
		return fmt.Errorf("nftables: list chains: %w", err)
	}
	var problems []string
	for _, ch := range chains {
		if ch.Table == nil || ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookForward ||
			ch.Type != nftables.ChainTypeFilter || ch.Policy == nil || *ch.Policy != nftables.ChainPolicyDrop {
			continue
		}
		for _, pod := range d.PodCIDRs() {
			if !forwardFamilySees(ch.Table.Family, pod) {
				continue
			}
			accepted, err := chainAccepts(c, ch.Table, ch.Name, pod, 0)
			if err != nil {
				return fmt.Errorf("nftables: rules of table %s %s chain %s: %w", familyName(ch.Table.Family), ch.Table.Name, ch.Name, err)
			}
			if !accepted {
				problems = append(problems, fmt.Sprintf("table %s %s chain %s has policy drop and no rule accepting %s",
					familyName(ch.Table.Family), ch.Table.Name, ch.Name, pod))
			}
		}
	}
	// iptables-legacy is not in nftables: its FORWARD chains are read
	// from the kernel apart.
	err = h.inNetns(func() error {
		for _, pod := range d.PodCIDRs() {
			p, err := legacyForward(pod)
			if err != nil {
				return err
			}
			if p != "" {
				problems = append(problems, p)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("the host's firewall drops forwarded pod traffic: %s; allow it there (iptables: -I FORWARD -s POD_CIDR -j ACCEPT and -d POD_CIDR -j ACCEPT for each of the node's pod CIDRs %v): an accept in bridgehead's own table cannot overrule another table's drop",
		strings.Join(problems, "; "), d.PodCIDRs())
}

// forwardFamilySees: a chain of the family sees the pod block's traffic.
func forwardFamilySees(f nftables.TableFamily, pod netip.Prefix) bool {
	switch f {
	case nftables.TableFamilyIPv4:
		return pod.Addr().Is4()
	case nftables.TableFamilyIPv6:
		return pod.Addr().Is6()
	case nftables.TableFamilyINet, nftables.TableFamilyBridge:
		return true
	}
	return false
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyBridge:
		return "bridge"
	}
	return fmt.Sprint(f)
}

// maxJumpDepth bounds how far chainAccepts follows jumps.
const maxJumpDepth = 8

// chainAccepts reports whether a rule of the chain, or of a chain it
// jumps or goes to, accepts traffic from pod on nothing but a source
// address match (counters and a protocol family match allowed).
func chainAccepts(c *nftables.Conn, t *nftables.Table, chain string, pod netip.Prefix, depth int) (bool, error) {
	if depth > maxJumpDepth {
		return false, nil
	}
	rules, err := c.GetRules(t, &nftables.Chain{Name: chain, Table: t})
	if err != nil {
		return false, err
	}
	for _, r := range rules {
		var v *expr.Verdict
		for _, e := range r.Exprs {
			if vv, ok := e.(*expr.Verdict); ok {
				v = vv
			}
		}
		if v == nil {
			continue
		}
		switch v.Kind {
		case expr.VerdictAccept:
			if acceptsSource(r.Exprs, pod) {
				return true, nil
			}
		case expr.VerdictJump, expr.VerdictGoto:
			ok, err := chainAccepts(c, t, v.Chain, pod, depth+1)
			if err != nil || ok {
				return ok, err
			}
		}
	}
	return false, nil
}

// acceptsSource: the rule's only conditions are a source address match
// that covers pod (payload load, optional mask, compare equal), and an
// optional family match.
func acceptsSource(es []expr.Any, pod netip.Prefix) bool {
	srcOff, alen := uint32(12), uint32(4)
	if pod.Addr().Is6() {
		srcOff, alen = 8, 16
	}
	matched := false
	for i := 0; i < len(es); i++ {
		switch e := es[i].(type) {
		case *expr.Counter, *expr.Verdict:
		case *expr.Meta:
			// meta nfproto / protocol, then its compare.
			if e.Key != expr.MetaKeyNFPROTO && e.Key != expr.MetaKeyPROTOCOL || i+1 >= len(es) {
				return false
			}
			if _, ok := es[i+1].(*expr.Cmp); !ok {
				return false
			}
			i++
		case *expr.Payload:
			// nft and iptables-nft load only the bytes a byte-aligned
			// prefix needs: ip saddr 10.1.0.0/16 loads 2 bytes.
			if e.Base != expr.PayloadBaseNetworkHeader || e.Offset != srcOff || e.Len == 0 || e.Len > alen {
				return false
			}
			mask := bytes.Repeat([]byte{0xff}, int(e.Len))
			j := i + 1
			if j < len(es) {
				if b, ok := es[j].(*expr.Bitwise); ok {
					mask = b.Mask
					j++
				}
			}
			if j >= len(es) {
				return false
			}
			cmp, ok := es[j].(*expr.Cmp)
			if !ok || cmp.Op != expr.CmpOpEq {
				return false
			}
			if len(cmp.Data) != int(e.Len) || len(mask) != int(e.Len) {
				return false
			}
			full, fullMask := make([]byte, alen), make([]byte, alen)
			copy(full, cmp.Data)
			copy(fullMask, mask)
			p, ok := maskPrefix(full, fullMask)
			if !ok || !p.Contains(pod.Addr()) || p.Bits() > pod.Bits() {
				return false
			}
			matched = true
			i = j
		default:
			return false
		}
	}
	return matched
}

// maskPrefix turns an address and a contiguous mask into a prefix.
func maskPrefix(data, mask []byte) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(data)
	if !ok || len(mask) != len(data) {
		return netip.Prefix{}, false
	}
	bits, ended := 0, false
	for _, m := range mask {
		for i := 7; i >= 0; i-- {
			if m&(1<<i) != 0 {
				if ended {
					return netip.Prefix{}, false
				}
				bits++
			} else {
				ended = true
			}
		}
	}
	return netip.PrefixFrom(a, bits).Masked(), true
}

// inNetns runs fn on a thread in h.ns (the current thread's namespace
// when nil): /proc/sys/net shows the namespace of the thread that opens
// it.
func (h *HostNet) inNetns(fn func() error) error {
	if h.ns == nil {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(*h.ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: %w", err)
	}
	ferr := fn()
	if err := unix.Setns(int(orig), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked: the runtime ends it with the goroutine.
		return errors.Join(ferr, fmt.Errorf("netns: back to the original: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}
