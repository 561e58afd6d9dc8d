package netpol

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Input is what Compile reads: the cluster's pods (every node's, as
// StripPod keeps them), namespaces and policies.
type Input struct {
	// Node is this node's name: only its pods' chains are compiled.
	Node       string
	Pods       []*Pod
	Namespaces []*corev1.Namespace
	Policies   []*networkingv1.NetworkPolicy
}

// pod is a pod as the compiler reads it.
type pod struct {
	ns, name string
	labels   labels.Set
	addrs    []netip.Addr
	local    bool
	// ports: container port name -> protocol and number.
	ports map[string][]namedPort
}

type namedPort struct {
	proto uint8
	port  uint16
}

// compiler holds the indexes of one Compile.
type compiler struct {
	in    Input
	nsLbl map[string]labels.Set
	byNS  map[string][]*pod
	pods  []*pod
	sets  map[string]*Set
	stats Stats
	// peerCache: rules with the same peers (most policies of a kind
	// repeat them) resolve them once.
	peerCache map[string]peerResult
}

type peerResult struct {
	ranges [2][]AddrRange
	pods   []*pod
}

// Compile turns the policy set into this node's ruleset. It is a pure
// function of its input: the same input gives the same Ruleset, in the
// same order. Policies whose selectors do not parse are left out (and
// counted in Stats.Invalid); the API server validates them, so this is
// defence only.
func Compile(in Input) *Ruleset {
	c := &compiler{in: in, nsLbl: map[string]labels.Set{}, byNS: map[string][]*pod{}, sets: map[string]*Set{}, peerCache: map[string]peerResult{}}
	for _, n := range in.Namespaces {
		c.nsLbl[n.Name] = labels.Set(n.Labels)
	}
	for _, p := range in.Pods {
		if q := readPod(p, in.Node); q != nil {
			c.pods = append(c.pods, q)
			c.byNS[q.ns] = append(c.byNS[q.ns], q)
		}
	}
	c.stats.Pods = len(c.pods)
	pols := slices.Clone(in.Policies)
	slices.SortFunc(pols, func(a, b *networkingv1.NetworkPolicy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	c.stats.Policies = len(pols)

	// Per local pod and direction: the policies that select it, and
	// each policy's compiled rules.
	type podDir struct {
		p   *pod
		dir Direction
	}
	selectedBy := map[podDir][]string{}
	rules := map[string][]Rule{} // policy key + direction -> rules
	for _, np := range pols {
		key := np.Namespace + "/" + np.Name
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			c.stats.Invalid++
			continue
		}
		var selected []*pod
		for _, p := range c.byNS[np.Namespace] {
			if p.local && sel.Matches(p.labels) {
				selected = append(selected, p)
			}
		}
		if len(selected) == 0 {
			continue
		}
		ingress, egress := policyTypes(np)
		ok := true
		if ingress {
			rs, err := c.ingressRules(np, key, selected)
			ok = ok && err == nil
			rules[key+"|in"] = rs
		}
		if egress {
			rs, err := c.egressRules(np, key)
			ok = ok && err == nil
			rules[key+"|eg"] = rs
		}
		if !ok {
			c.stats.Invalid++
			delete(rules, key+"|in")
			delete(rules, key+"|eg")
			continue
		}
		c.stats.LocalPolicies++
		for _, p := range selected {
			if ingress {
				selectedBy[podDir{p, Ingress}] = append(selectedBy[podDir{p, Ingress}], key)
			}
			if egress {
				selectedBy[podDir{p, Egress}] = append(selectedBy[podDir{p, Egress}], key)
			}
		}
	}

	rs := &Ruleset{}
	chains := map[string]*Chain{}
	counters := map[string]Counter{}
	localPods := map[*pod]bool{}
	for pd, keys := range selectedBy {
		localPods[pd.p] = true
		name := chainName(pd.dir, keys)
		if _, ok := chains[name]; !ok {
			ch := &Chain{Name: name, Dir: pd.dir, Policies: keys}
			suffix := "|in"
			if pd.dir == Egress {
				suffix = "|eg"
			}
			for _, k := range keys {
				ch.Rules = append(ch.Rules, rules[k+suffix]...)
			}
			ch.Rules = append(ch.Rules, Rule{Counter: "drop-" + name, Verdict: Drop, Dir: pd.dir})
			chains[name] = ch
			counters["drop-"+name] = Counter{Name: "drop-" + name, Dir: pd.dir, Verdict: Drop, Policies: keys}
			for _, r := range ch.Rules {
				if r.Policy != "" {
					counters[r.Counter] = Counter{Name: r.Counter, Dir: pd.dir, Verdict: Accept, Policies: []string{r.Policy}}
				}
			}
		}
		for _, a := range pd.p.addrs {
			rs.Dispatch = append(rs.Dispatch, Dispatch{Dir: pd.dir, Addr: a, Chain: name})
		}
	}
	for _, ch := range chains {
		rs.Chains = append(rs.Chains, *ch)
		c.stats.Rules += len(ch.Rules)
	}
	for _, ctr := range counters {
		rs.Counters = append(rs.Counters, ctr)
	}
	slices.SortFunc(rs.Counters, func(a, b Counter) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(rs.Chains, func(a, b Chain) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(rs.Dispatch, func(a, b Dispatch) int {
		return cmp.Or(cmp.Compare(a.Dir, b.Dir), a.Addr.Compare(b.Addr))
	})
	for _, d := range rs.Dispatch {
		rs.Self = append(rs.Self, d.Addr)
	}
	slices.SortFunc(rs.Self, netip.Addr.Compare)
	rs.Self = slices.Compact(rs.Self)
	for _, s := range c.sets {
		rs.Sets = append(rs.Sets, *s)
		c.stats.Elements += len(s.Ranges) + len(s.AddrPorts)
	}
	slices.SortFunc(rs.Sets, func(a, b Set) int { return cmp.Compare(a.Name, b.Name) })
	c.stats.LocalPods = len(localPods)
	c.stats.Chains = len(rs.Chains)
	c.stats.Sets = len(rs.Sets)
	c.stats.Dispatch = len(rs.Dispatch)
	rs.Stats = c.stats
	return rs
}

// readPod keeps a pod that has addresses and takes part in pod
// networking: hostNetwork pods carry the node's address (policies do
// not apply to them, and as peers they would stand for the whole node),
// and a finished pod's address may already be another pod's.
func readPod(p *Pod, node string) *pod {
	if p.HostNetwork || p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed {
		return nil
	}
	q := &pod{ns: p.Namespace, name: p.Name, labels: labels.Set(p.Labels), local: p.NodeName == node}
	for _, ip := range p.IPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			q.addrs = append(q.addrs, a.Unmap())
		}
	}
	if len(q.addrs) == 0 {
		return nil
	}
	for _, cp := range p.Ports {
		if cp.Name == "" || cp.ContainerPort <= 0 || cp.ContainerPort > 65535 {
			continue
		}
		if q.ports == nil {
			q.ports = map[string][]namedPort{}
		}
		q.ports[cp.Name] = append(q.ports[cp.Name], namedPort{proto: protoNumber(cp.Protocol), port: uint16(cp.ContainerPort)})
	}
	return q
}

func protoNumber(p corev1.Protocol) uint8 {
	switch p {
	case corev1.ProtocolUDP:
		return protoUDP
	case corev1.ProtocolSCTP:
		return protoSCTP
	}
	return protoTCP
}

// policyTypes are the directions a policy isolates: its policyTypes, or
// as the API server defaults them when empty (Ingress, and Egress when
// it has egress rules).
func policyTypes(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	return ingress, egress
}

// allowCounter names the counter of a policy's allow rules in one
// direction.
func allowCounter(dir Direction, key string) string {
	sum := sha256.Sum256([]byte(dir.String() + "\x00" + key))
	return "allow-" + dir.String()[:2] + "-" + hex.EncodeToString(sum[:8])
}

// chainName names the chain of a direction and list of policies.
func chainName(dir Direction, keys []string) string {
	sum := sha256.Sum256([]byte(dir.String() + "\x00" + strings.Join(keys, "\x00")))
	prefix := "in-"
	if dir == Egress {
		prefix = "eg-"
	}
	return prefix + hex.EncodeToString(sum[:8])
}

// portSpec is one entry of a rule's ports: a number range, or a name.
type portSpec struct {
	proto  uint8
	lo, hi uint16 // 0: every port of proto
	name   string
}

func readPorts(ps []networkingv1.NetworkPolicyPort) ([]portSpec, error) {
	var out []portSpec
	for _, p := range ps {
		s := portSpec{proto: protoTCP}
		if p.Protocol != nil {
			s.proto = protoNumber(*p.Protocol)
		}
		switch {
		case p.Port == nil:
		case p.Port.Type == intstr.String:
			s.name = p.Port.StrVal
		default:
			v := p.Port.IntVal
			if v < 1 || v > 65535 {
				return nil, fmt.Errorf("port %d", v)
			}
			s.lo, s.hi = uint16(v), uint16(v)
			if p.EndPort != nil {
				if *p.EndPort < v || *p.EndPort > 65535 {
					return nil, fmt.Errorf("endPort %d", *p.EndPort)
				}
				s.hi = uint16(*p.EndPort)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// peers resolves a rule's peers to address ranges per family (index 0:
// IPv4, 1: IPv6) and the pods among them. any: the rule has no peers (it
// matches every address).
func (c *compiler) peers(policyNS string, ps []networkingv1.NetworkPolicyPeer) (ranges [2][]AddrRange, pods []*pod, any bool, err error) {
	if len(ps) == 0 {
		return ranges, c.pods, true, nil
	}
	key := peersKey(policyNS, ps)
	if r, ok := c.peerCache[key]; ok {
		return r.ranges, r.pods, false, nil
	}
	defer func() {
		if err == nil {
			c.peerCache[key] = peerResult{ranges, pods}
		}
	}()
	var prefixes []netip.Prefix
	var blocks [][2][]netip.Prefix
	seen := map[*pod]bool{}
	for _, p := range ps {
		if p.IPBlock != nil {
			cidr, err := netip.ParsePrefix(p.IPBlock.CIDR)
			if err != nil {
				return ranges, nil, false, fmt.Errorf("ipBlock %q: %w", p.IPBlock.CIDR, err)
			}
			var ex []netip.Prefix
			for _, e := range p.IPBlock.Except {
				ep, err := netip.ParsePrefix(e)
				if err != nil {
					return ranges, nil, false, fmt.Errorf("ipBlock except %q: %w", e, err)
				}
				ex = append(ex, ep.Masked())
			}
			blocks = append(blocks, [2][]netip.Prefix{{cidr.Masked()}, ex})
			continue
		}
		if p.PodSelector == nil && p.NamespaceSelector == nil {
			continue // not valid in the API; matches nothing
		}
		podSel := labels.Everything()
		if p.PodSelector != nil {
			if podSel, err = metav1.LabelSelectorAsSelector(p.PodSelector); err != nil {
				return ranges, nil, false, err
			}
		}
		var namespaces []string
		if p.NamespaceSelector == nil {
			namespaces = []string{policyNS}
		} else {
			nsSel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
			if err != nil {
				return ranges, nil, false, err
			}
			for ns, l := range c.nsLbl {
				if nsSel.Matches(l) {
					namespaces = append(namespaces, ns)
				}
			}
		}
		for _, ns := range namespaces {
			for _, q := range c.byNS[ns] {
				if !seen[q] && podSel.Matches(q.labels) {
					seen[q] = true
					pods = append(pods, q)
					for _, a := range q.addrs {
						prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
					}
				}
			}
		}
	}
	var rs []AddrRange
	for _, b := range blocks {
		rs = append(rs, subtract(b[0][0], b[1])...)
	}
	for _, p := range prefixes {
		rs = append(rs, prefixRange(p))
	}
	for _, r := range mergeRanges(rs) {
		i := 0
		if r.First.Is6() {
			i = 1
		}
		ranges[i] = append(ranges[i], r)
	}
	slices.SortFunc(pods, func(a, b *pod) int { return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.name, b.name)) })
	return ranges, pods, false, nil
}

// peersKey identifies what a list of peers resolves to: the policy's
// namespace counts only where a peer has no namespaceSelector.
func peersKey(policyNS string, ps []networkingv1.NetworkPolicyPeer) string {
	var b strings.Builder
	for _, p := range ps {
		if p.IPBlock != nil {
			fmt.Fprintf(&b, "ip=%s-%v;", p.IPBlock.CIDR, p.IPBlock.Except)
			continue
		}
		if p.NamespaceSelector == nil {
			fmt.Fprintf(&b, "ns==%s,", policyNS)
		} else {
			fmt.Fprintf(&b, "nss=%s,", p.NamespaceSelector.String())
		}
		if p.PodSelector != nil {
			fmt.Fprintf(&b, "pods=%s;", p.PodSelector.String())
		} else {
			b.WriteString("pods=*;")
		}
	}
	return b.String()
}

// ingressRules compiles a policy's ingress rules: each allows its peers
// (by source address) to its ports of the selected pods.
func (c *compiler) ingressRules(np *networkingv1.NetworkPolicy, key string, selected []*pod) ([]Rule, error) {
	var out []Rule
	for _, r := range np.Spec.Ingress {
		ports, err := readPorts(r.Ports)
		if err != nil {
			return nil, err
		}
		ranges, _, any, err := c.peers(np.Namespace, r.From)
		if err != nil {
			return nil, err
		}
		// Named ports: resolved on the selected (destination) pods.
		out = append(out, c.rules(Ingress, key, Accept, ranges, any, ports, namedPorts(ports, selected))...)
	}
	return out, nil
}

// egressRules compiles a policy's egress rules: each allows the
// selected pods to its peers (by destination address) on its ports.
func (c *compiler) egressRules(np *networkingv1.NetworkPolicy, key string) ([]Rule, error) {
	var out []Rule
	for _, r := range np.Spec.Egress {
		ports, err := readPorts(r.Ports)
		if err != nil {
			return nil, err
		}
		ranges, pods, any, err := c.peers(np.Namespace, r.To)
		if err != nil {
			return nil, err
		}
		// Named ports: resolved on the peer (destination) pods; an
		// ipBlock peer has no named ports.
		out = append(out, c.rules(Egress, key, Return, ranges, any, ports, namedPorts(ports, pods))...)
	}
	return out, nil
}

// namedPorts resolves the named ports among ports on the destination
// pods dst: each address of a pod that has the name, with its protocol
// and number, by address family.
func namedPorts(ports []portSpec, dst []*pod) [2][]AddrPort {
	var named [2][]AddrPort
	for _, ps := range ports {
		if ps.name == "" {
			continue
		}
		for _, p := range dst {
			for _, np := range p.ports[ps.name] {
				if np.proto != ps.proto {
					continue
				}
				for _, a := range p.addrs {
					named[famIndex(a)] = append(named[famIndex(a)], AddrPort{Addr: a, Proto: np.proto, Port: np.port})
				}
			}
		}
	}
	return named
}

func famIndex(a netip.Addr) int {
	if a.Is6() {
		return 1
	}
	return 0
}

// rules turns one policy rule into nft rules: per family, one per
// numbered port (or one for every port), and one for the named ports.
func (c *compiler) rules(dir Direction, key string, v Verdict, ranges [2][]AddrRange, any bool, ports []portSpec, named [2][]AddrPort) (out []Rule) {
	defer func() {
		name := allowCounter(dir, key)
		for i := range out {
			out[i].Counter = name
		}
	}()
	var numbered []portSpec
	hasNamed := false
	for _, p := range ports {
		if p.name != "" {
			hasNamed = true
		} else {
			numbered = append(numbered, p)
		}
	}
	if any {
		// No peers: the port matches alone, for both families.
		if len(ports) == 0 {
			out = append(out, Rule{Dir: dir, Verdict: v, Policy: key})
		}
		for _, p := range numbered {
			out = append(out, Rule{Dir: dir, Proto: p.proto, PortLo: p.lo, PortHi: p.hi, Verdict: v, Policy: key})
		}
		if hasNamed {
			for i, fam := range []int{4, 6} {
				if len(named[i]) > 0 {
					out = append(out, Rule{Dir: dir, Family: fam, Named: c.addrPortSet(fam, named[i]), Verdict: v, Policy: key})
				}
			}
		}
		return out
	}
	for i, fam := range []int{4, 6} {
		if len(ranges[i]) == 0 {
			continue
		}
		peers := c.addrSet(fam, ranges[i])
		if len(ports) == 0 {
			out = append(out, Rule{Dir: dir, Family: fam, Peers: peers, Verdict: v, Policy: key})
		}
		for _, p := range numbered {
			out = append(out, Rule{Dir: dir, Family: fam, Peers: peers, Proto: p.proto, PortLo: p.lo, PortHi: p.hi, Verdict: v, Policy: key})
		}
		if hasNamed && len(named[i]) > 0 {
			r := Rule{Dir: dir, Family: fam, Named: c.addrPortSet(fam, named[i]), Verdict: v, Policy: key}
			if dir == Ingress {
				// Egress: the named set holds only the peer pods'
				// addresses already.
				r.Peers = peers
			}
			out = append(out, r)
		}
	}
	return out
}

// addrSet returns the name of the set of ranges, adding it once.
func (c *compiler) addrSet(fam int, rs []AddrRange) string {
	h := sha256.New()
	for _, r := range rs {
		h.Write(r.First.AsSlice())
		h.Write(r.Last.AsSlice())
	}
	name := fmt.Sprintf("a%d-%s", fam, hex.EncodeToString(h.Sum(nil)[:8]))
	if _, ok := c.sets[name]; !ok {
		c.sets[name] = &Set{Name: name, Family: fam, Kind: SetAddrs, Ranges: rs}
	}
	return name
}

// addrPortSet returns the name of the set of elements, adding it once.
func (c *compiler) addrPortSet(fam int, els []AddrPort) string {
	slices.SortFunc(els, func(a, b AddrPort) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
	})
	els = slices.Compact(els)
	h := sha256.New()
	for _, e := range els {
		h.Write(e.Addr.AsSlice())
		h.Write([]byte{e.Proto, byte(e.Port >> 8), byte(e.Port)})
	}
	name := fmt.Sprintf("n%d-%s", fam, hex.EncodeToString(h.Sum(nil)[:8]))
	if _, ok := c.sets[name]; !ok {
		c.sets[name] = &Set{Name: name, Family: fam, Kind: SetAddrPorts, AddrPorts: els}
	}
	return name
}

// prefixRange is a prefix's first and last address.
func prefixRange(p netip.Prefix) AddrRange {
	p = p.Masked()
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	last, _ := netip.AddrFromSlice(b)
	return AddrRange{First: p.Addr(), Last: last}
}

// subtract is cidr without the excepts, as ranges. Excepts of another
// family or outside cidr take nothing away.
func subtract(cidr netip.Prefix, excepts []netip.Prefix) []AddrRange {
	out := []AddrRange{prefixRange(cidr)}
	for _, e := range excepts {
		if e.Addr().Is4() != cidr.Addr().Is4() {
			continue
		}
		er := prefixRange(e)
		var next []AddrRange
		for _, r := range out {
			if er.Last.Less(r.First) || r.Last.Less(er.First) {
				next = append(next, r)
				continue
			}
			if r.First.Less(er.First) {
				next = append(next, AddrRange{r.First, er.First.Prev()})
			}
			if er.Last.Less(r.Last) {
				next = append(next, AddrRange{er.Last.Next(), r.Last})
			}
		}
		out = next
	}
	return out
}

// mergeRanges sorts ranges and merges overlapping and adjacent ones.
func mergeRanges(rs []AddrRange) []AddrRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b AddrRange) int {
		return cmp.Or(cmp.Compare(a.First.BitLen(), b.First.BitLen()), a.First.Compare(b.First))
	})
	var out []AddrRange
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].First.BitLen() == r.First.BitLen() {
			last := out[n-1].Last
			if next := last.Next(); r.First.Compare(last) <= 0 || (next.IsValid() && r.First == next) {
				if r.Last.Compare(last) > 0 {
					out[n-1].Last = r.Last
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}
