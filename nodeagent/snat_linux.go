package nodeagent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// SNATTable is the nftables table the agent owns (family inet).
const SNATTable = "bridgehead-node"

// snatChain is the postrouting NAT chain in SNATTable.
const snatChain = "postrouting"

// SNAT keeps the table "inet bridgehead-node": pod traffic of this node
// to anything outside the cluster leaves with the node's address
// (masquerade); traffic to any pod, node or service CIDR of any site keeps
// the pod's address. The table holds one postrouting NAT chain and, per
// address family with a pod block,
//
//	set pods4    { <the node's pod block> }
//	set cluster4 { <every cluster CIDR>, merged into intervals }
//	meta nfproto ipv4 ip saddr @pods4 ip daddr != @cluster4 masquerade
//
// Each rule carries a fingerprint of the model in its comment; Ensure
// compares the table's content with the model (the fingerprint, the
// rules' expressions, the sets and every element) and rewrites the whole
// table in one transaction only when it differs. Its methods may be called from one
// goroutine at a time.
type SNAT struct {
	// dial opens a connection to the namespace's nftables.
	dial func() (*nftables.Conn, error)
}

// NewSNAT manages the table in the namespace that dial's connections
// talk to (nftables.New() for the current one).
func NewSNAT(dial func() (*nftables.Conn, error)) *SNAT { return &SNAT{dial: dial} }

// snatFamily is one address family's sets and rule.
type snatFamily struct {
	name    string // "4" or "6"
	proto   byte   // NFPROTO_IPV4/6
	keyType nftables.SetDatatype
	// srcOff, dstOff, addrLen locate the addresses in the IP header.
	srcOff, dstOff, addrLen uint32
	pods, cluster           []netip.Prefix
}

func snatFamilies(d *Desired) []snatFamily {
	var out []snatFamily
	if d.PodCIDR.IsValid() {
		out = append(out, snatFamily{name: "4", proto: unix.NFPROTO_IPV4, keyType: nftables.TypeIPAddr,
			srcOff: 12, dstOff: 16, addrLen: 4, pods: []netip.Prefix{d.PodCIDR}})
	}
	if d.PodCIDR6.IsValid() {
		out = append(out, snatFamily{name: "6", proto: unix.NFPROTO_IPV6, keyType: nftables.TypeIP6Addr,
			srcOff: 8, dstOff: 24, addrLen: 16, pods: []netip.Prefix{d.PodCIDR6}})
	}
	for i := range out {
		for _, p := range d.ClusterCIDRs {
			if p.Addr().Is4() == (out[i].name == "4") {
				out[i].cluster = append(out[i].cluster, p)
			}
		}
	}
	return out
}

// exprs is the family's masquerade rule: from a pod block, to outside
// the cluster.
func (f snatFamily) exprs(pods, cluster *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f.proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.srcOff, Len: f.addrLen},
		&expr.Lookup{SourceRegister: 1, SetName: pods.Name, SetID: pods.ID},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.dstOff, Len: f.addrLen},
		&expr.Lookup{SourceRegister: 1, SetName: cluster.Name, SetID: cluster.ID, Invert: true},
		&expr.Masq{},
	}
}

// fingerprint identifies the table's contents for a model.
func snatFingerprint(fams []snatFamily) string {
	var b strings.Builder
	b.WriteString("v1")
	for _, f := range fams {
		fmt.Fprintf(&b, ";%s:%v:%v", f.name, f.pods, f.cluster)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "bridgehead node " + hex.EncodeToString(sum[:8])
}

// Ensure makes the table match d. It reports whether it wrote the table.
func (s *SNAT) Ensure(d *Desired) (bool, error) {
	fams := snatFamilies(d)
	fp := snatFingerprint(fams)
	c, err := s.dial()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	if ok, err := s.matches(c, fams, fp); err != nil {
		return false, err
	} else if ok {
		return false, nil
	}
	t := &nftables.Table{Name: SNATTable, Family: nftables.TableFamilyINet}
	// Add (a no-op if present), delete and add again: one transaction
	// that replaces whatever the table held, atomically.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	ch := c.AddChain(&nftables.Chain{Name: snatChain, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	for _, f := range fams {
		pods := &nftables.Set{Table: t, Name: "pods" + f.name, KeyType: f.keyType, Interval: true}
		cluster := &nftables.Set{Table: t, Name: "cluster" + f.name, KeyType: f.keyType, Interval: true}
		if err := c.AddSet(pods, intervalElements(f.pods)); err != nil {
			return false, fmt.Errorf("nftables set %s: %w", pods.Name, err)
		}
		if err := c.AddSet(cluster, intervalElements(f.cluster)); err != nil {
			return false, fmt.Errorf("nftables set %s: %w", cluster.Name, err)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, UserData: userdata.AppendString(nil, userdata.TypeComment, fp),
			Exprs: f.exprs(pods, cluster)})
	}
	if err := c.Flush(); err != nil {
		return false, fmt.Errorf("nftables: write table inet %s: %w", SNATTable, err)
	}
	return true, nil
}

// matches reports whether the table holds exactly what Ensure writes for
// fams: the one postrouting NAT chain, one rule per family with the
// fingerprint and Ensure's expressions, and exactly the sets the rules
// use, each with exactly Ensure's elements. Any hand edit — an element
// added to or deleted from a set, a rule changed, added or deleted, a set
// or chain added — makes it differ, and Ensure rewrites the table. A
// piece that cannot be listed counts as a difference.
func (s *SNAT) matches(c *nftables.Conn, fams []snatFamily, fp string) (bool, error) {
	t, err := c.ListTableOfFamily(SNATTable, nftables.TableFamilyINet)
	if errors.Is(err, unix.ENOENT) || (err == nil && t == nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("nftables: list table inet %s: %w", SNATTable, err)
	}
	return snatChainMatches(c, t) && snatRulesMatch(c, t, fams, fp) && snatSetsMatch(c, t, fams), nil
}

// snatChainMatches: the table's only chain is the postrouting NAT chain.
func snatChainMatches(c *nftables.Conn, t *nftables.Table) bool {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return false
	}
	n := 0
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != t.Name {
			continue
		}
		n++
		if ch.Name != snatChain || ch.Type != nftables.ChainTypeNAT ||
			ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookPostrouting ||
			ch.Priority == nil || *ch.Priority != *nftables.ChainPriorityNATSource {
			return false
		}
	}
	return n == 1
}

// snatRulesMatch: one rule per family, in order, each carrying the
// fingerprint and Ensure's expressions.
func snatRulesMatch(c *nftables.Conn, t *nftables.Table, fams []snatFamily, fp string) bool {
	rules, err := c.GetRules(t, &nftables.Chain{Name: snatChain, Table: t})
	if err != nil || len(rules) != len(fams) {
		return false
	}
	for i, r := range rules {
		if got, _ := userdata.GetString(r.UserData, userdata.TypeComment); got != fp {
			return false
		}
		f := fams[i]
		want := f.exprs(&nftables.Set{Name: "pods" + f.name}, &nftables.Set{Name: "cluster" + f.name})
		if len(r.Exprs) != len(want) {
			return false
		}
		for j := range want {
			if exprKey(r.Exprs[j]) != exprKey(want[j]) {
				return false
			}
		}
	}
	return true
}

// exprKey describes an expression by what it does: a lookup by its set's
// name (the kernel assigns set IDs), anything else by its fields.
func exprKey(e expr.Any) string {
	if l, ok := e.(*expr.Lookup); ok {
		return fmt.Sprintf("lookup %s reg %d invert %v", l.SetName, l.SourceRegister, l.Invert)
	}
	return fmt.Sprintf("%T %+v", e, e)
}

// snatSetsMatch: the table holds exactly the families' sets, each with
// exactly the elements Ensure writes.
func snatSetsMatch(c *nftables.Conn, t *nftables.Table, fams []snatFamily) bool {
	want := map[string][]netip.Prefix{}
	for _, f := range fams {
		want["pods"+f.name] = f.pods
		want["cluster"+f.name] = f.cluster
	}
	sets, err := c.GetSets(t)
	if err != nil || len(sets) != len(want) {
		return false
	}
	for _, st := range sets {
		ps, ok := want[st.Name]
		if !ok {
			return false
		}
		els, err := c.GetSetElements(st)
		if err != nil || !slices.Equal(elementKeys(els), elementKeys(intervalElements(ps))) {
			return false
		}
	}
	return true
}

// elementKeys describes a set's elements, sorted (the kernel lists an
// interval set in its own order).
func elementKeys(els []nftables.SetElement) []string {
	out := make([]string, 0, len(els))
	for _, e := range els {
		out = append(out, fmt.Sprintf("%x end=%v", e.Key, e.IntervalEnd))
	}
	slices.Sort(out)
	return out
}

// Remove deletes the table; a missing table is not an error.
func (s *SNAT) Remove() error {
	c, err := s.dial()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t, err := c.ListTableOfFamily(SNATTable, nftables.TableFamilyINet)
	if errors.Is(err, unix.ENOENT) || (err == nil && t == nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nftables: list table inet %s: %w", SNATTable, err)
	}
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete table inet %s: %w", SNATTable, err)
	}
	return nil
}

// intervalElements turns prefixes into the elements of an interval set:
// overlapping and adjacent prefixes merged, each range as its first
// address and, flagged IntervalEnd, the address after its last (left
// out when the range runs to the top of the address space).
func intervalElements(ps []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, r := range mergeRanges(ps) {
		out = append(out, nftables.SetElement{Key: r[0].AsSlice()})
		if next := r[1].Next(); next.IsValid() {
			out = append(out, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

// mergeRanges returns the prefixes as sorted, disjoint, non-adjacent
// [first, last] address ranges.
func mergeRanges(ps []netip.Prefix) [][2]netip.Addr {
	var rs [][2]netip.Addr
	for _, p := range ps {
		if p.IsValid() {
			p = p.Masked()
			rs = append(rs, [2]netip.Addr{p.Addr(), lastAddr(p)})
		}
	}
	slices.SortFunc(rs, func(a, b [2]netip.Addr) int { return a[0].Compare(b[0]) })
	var out [][2]netip.Addr
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := out[n-1][1]
			if next := last.Next(); r[0].Compare(last) <= 0 || (next.IsValid() && r[0] == next) {
				if r[1].Compare(last) > 0 {
					out[n-1][1] = r[1]
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// lastAddr is the last address of a masked prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
