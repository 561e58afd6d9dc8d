package netpol

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// baseChain is the table's one base chain.
const baseChain = "forward"

// Table writes Rulesets into the table "inet bridgehead-netpol", whole
// and in one netlink transaction: the kernel swaps the old table for the
// new one atomically, so no packet sees half a ruleset, and conntrack
// (outside the table) keeps every established connection. Its methods
// may be called from one goroutine at a time.
type Table struct {
	dial func(...nftables.ConnOption) (*nftables.Conn, error)
}

// NewTable writes into the namespace that dial's connections talk to
// (nftables.New for the current one); dial passes the options on to
// nftables.New.
func NewTable(dial func(...nftables.ConnOption) (*nftables.Conn, error)) *Table {
	return &Table{dial: dial}
}

// Socket buffers of a write. The whole table goes in one batch (one
// sendmsg: the kernel refuses a batch larger than the send buffer), and
// the kernel acknowledges every message of it before Write reads the
// first acknowledgement (some 1 KiB of receive buffer each). The
// *FORCE options pass net.core.wmem_max and rmem_max (CAP_NET_ADMIN);
// the kernel charges the memory only while a batch is in flight. 64 MiB
// is some 20 times the batch of 1,000 policies over 10,000 pods all on
// one node (BenchmarkWrite).
const sockBuf = 64 << 20

func bigBuffers(c *netlink.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = errors.Join(
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBuf),
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBuf))
	}); err != nil {
		return err
	}
	return serr
}

// elementsPerMessage bounds a set's elements in one netlink message: the
// element list is one attribute, whose length is 16 bits (64 KiB); an
// element takes at most some 100 bytes (an IPv6 key, flags, a verdict).
const elementsPerMessage = 400

// Current reports the fingerprint of the ruleset in the table ("" when
// there is no table, or it is not one Table wrote).
func (t *Table) Current() (string, error) {
	c, err := t.dial()
	if err != nil {
		return "", fmt.Errorf("nftables: %w", err)
	}
	tbl, err := c.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	if errors.Is(err, unix.ENOENT) || (err == nil && tbl == nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("nftables: list table inet %s: %w", TableName, err)
	}
	rules, err := c.GetRules(tbl, &nftables.Chain{Name: baseChain, Table: tbl})
	if err != nil || len(rules) == 0 {
		return "", nil
	}
	fp, _ := userdata.GetString(rules[0].UserData, userdata.TypeComment)
	return fp, nil
}

// Write replaces the table's content with rs, in one transaction.
func (t *Table) Write(rs *Ruleset) error {
	c, err := t.dial(nftables.WithSockOptions(bigBuffers))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	tbl := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	c.AddTable(tbl)
	c.DelTable(tbl)
	c.AddTable(tbl)

	sets := map[string]*nftables.Set{}
	for _, s := range rs.Sets {
		ns, els, err := nftSet(tbl, s)
		if err != nil {
			return err
		}
		if err := addSet(c, ns, els); err != nil {
			return fmt.Errorf("nftables set %s: %w", s.Name, err)
		}
		sets[s.Name] = ns
	}
	for _, ctr := range rs.Counters {
		c.AddObj(&nftables.NamedObj{Table: tbl, Name: ctr.Name, Type: nftables.ObjTypeCounter, Obj: &expr.Counter{}})
	}
	for _, ch := range rs.Chains {
		nch := c.AddChain(&nftables.Chain{Name: ch.Name, Table: tbl})
		for _, r := range ch.Rules {
			exprs, err := ruleExprs(r, sets)
			if err != nil {
				return fmt.Errorf("chain %s: %w", ch.Name, err)
			}
			c.AddRule(&nftables.Rule{Table: tbl, Chain: nch, Exprs: exprs,
				UserData: userdata.AppendString(nil, userdata.TypeComment, ruleComment(ch, r))})
		}
	}
	vmaps := map[string]*nftables.Set{}
	for _, dir := range []Direction{Egress, Ingress} {
		for _, fam := range []int{4, 6} {
			key := nftables.TypeIPAddr
			if fam == 6 {
				key = nftables.TypeIP6Addr
			}
			name := fmt.Sprintf("%s%d", dir, fam)
			m := &nftables.Set{Table: tbl, Name: name, KeyType: key, DataType: nftables.TypeVerdict, IsMap: true}
			var els []nftables.SetElement
			for _, d := range rs.Dispatch {
				if d.Dir == dir && (d.Addr.Is6() == (fam == 6)) {
					els = append(els, nftables.SetElement{Key: d.Addr.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: d.Chain}})
				}
			}
			if err := addSet(c, m, els); err != nil {
				return fmt.Errorf("nftables map %s: %w", name, err)
			}
			vmaps[name] = m
		}
	}
	for _, fam := range []int{4, 6} {
		addr := nftables.TypeIPAddr
		if fam == 6 {
			addr = nftables.TypeIP6Addr
		}
		kt, err := nftables.ConcatSetType(addr, addr)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("self%d", fam)
		self := &nftables.Set{Table: tbl, Name: name, KeyType: kt, Concatenation: true}
		var els []nftables.SetElement
		for _, a := range rs.Self {
			if a.Is6() == (fam == 6) {
				els = append(els, nftables.SetElement{Key: append(a.AsSlice(), a.AsSlice()...)})
			}
		}
		if err := addSet(c, self, els); err != nil {
			return fmt.Errorf("nftables set %s: %w", name, err)
		}
		vmaps[name] = self
	}
	base := c.AddChain(&nftables.Chain{Name: baseChain, Table: tbl, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	for i, exprs := range baseRules(vmaps) {
		r := &nftables.Rule{Table: tbl, Chain: base, Exprs: exprs}
		if i == 0 {
			r.UserData = userdata.AppendString(nil, userdata.TypeComment, Fingerprint(rs))
		}
		c.AddRule(r)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: write table inet %s: %w", TableName, err)
	}
	return nil
}

// addSet adds the set and its elements, elementsPerMessage a message,
// never parting an interval's start from its end.
func addSet(c *nftables.Conn, s *nftables.Set, els []nftables.SetElement) error {
	if err := c.AddSet(s, nil); err != nil {
		return err
	}
	for len(els) > 0 {
		n := min(len(els), elementsPerMessage)
		if n < len(els) && els[n].IntervalEnd {
			n++
		}
		if err := c.SetAddElements(s, els[:n]); err != nil {
			return err
		}
		els = els[n:]
	}
	return nil
}

// ruleComment says where a rule comes from, for an operator reading
// `nft list table inet bridgehead-netpol`.
func ruleComment(ch Chain, r Rule) string {
	if r.Policy == "" {
		return fmt.Sprintf("%s isolated by %d policies", ch.Dir, len(ch.Policies))
	}
	return "policy " + r.Policy
}

// Counters reads the table's named counters: packets by counter name.
// No table: none.
func (t *Table) Counters() (map[string]uint64, error) {
	c, err := t.dial()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	tbl := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	objs, err := c.GetNamedObjects(tbl)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nftables: list counters of inet %s: %w", TableName, err)
	}
	out := make(map[string]uint64, len(objs))
	for _, o := range objs {
		if no, ok := o.(*nftables.NamedObj); ok && no.Type == nftables.ObjTypeCounter && no.Table != nil && no.Table.Name == TableName {
			if ctr, ok := no.Obj.(*expr.Counter); ok {
				out[no.Name] = ctr.Packets
			}
		}
	}
	return out, nil
}

// Remove deletes the table; a missing table is not an error.
func (t *Table) Remove() error {
	c, err := t.dial()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	tbl, err := c.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	if errors.Is(err, unix.ENOENT) || (err == nil && tbl == nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nftables: list table inet %s: %w", TableName, err)
	}
	c.DelTable(tbl)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete table inet %s: %w", TableName, err)
	}
	return nil
}

// Address offsets in the IP headers.
type famHdr struct {
	proto          byte
	src, dst, size uint32
}

var hdr = map[int]famHdr{
	4: {unix.NFPROTO_IPV4, 12, 16, 4},
	6: {unix.NFPROTO_IPV6, 8, 24, 16},
}

// baseRules are the base chain's rules (vmaps holds the verdict maps and
// the self sets):
//
//	ct state established,related accept
//	meta nfproto ipv6 meta l4proto ipv6-icmp icmpv6 type 133-137 accept
//	ip saddr . ip daddr @self4 accept
//	ip6 saddr . ip6 daddr @self6 accept
//	ip saddr vmap @egress4
//	ip6 saddr vmap @egress6
//	ip daddr vmap @ingress4
//	ip6 daddr vmap @ingress6
//
// An egress chain returns on allow (the packet goes on to the ingress
// maps) and drops otherwise; an ingress chain accepts or drops.
func baseRules(vmaps map[string]*nftables.Set) [][]expr.Any {
	out := [][]expr.Any{
		{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
			&expr.Verdict{Kind: expr.VerdictAccept},
		},
		{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			&expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: []byte{133}},
			&expr.Cmp{Op: expr.CmpOpLte, Register: 1, Data: []byte{137}},
			&expr.Verdict{Kind: expr.VerdictAccept},
		},
	}
	for _, fam := range []int{4, 6} {
		h := hdr[fam]
		self := vmaps[fmt.Sprintf("self%d", fam)]
		out = append(out, []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{h.proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: h.src, Len: h.size},
			&expr.Payload{DestRegister: 8 + h.size/4, Base: expr.PayloadBaseNetworkHeader, Offset: h.dst, Len: h.size},
			&expr.Lookup{SourceRegister: 1, SetName: self.Name, SetID: self.ID},
			&expr.Verdict{Kind: expr.VerdictAccept},
		})
	}
	for _, dir := range []Direction{Egress, Ingress} {
		for _, fam := range []int{4, 6} {
			h := hdr[fam]
			off := h.dst
			if dir == Egress {
				off = h.src
			}
			m := vmaps[fmt.Sprintf("%s%d", dir, fam)]
			out = append(out, []expr.Any{
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{h.proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: h.size},
				&expr.Lookup{SourceRegister: 1, SetName: m.Name, SetID: m.ID, IsDestRegSet: true, DestRegister: 0},
			})
		}
	}
	return out
}

// ruleExprs encodes a pod chain's rule.
func ruleExprs(r Rule, sets map[string]*nftables.Set) ([]expr.Any, error) {
	var out []expr.Any
	if r.Family != 0 {
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{hdr[r.Family].proto}})
	}
	h := hdr[r.Family]
	if r.Peers != "" {
		s, ok := sets[r.Peers]
		if !ok {
			return nil, fmt.Errorf("no set %s", r.Peers)
		}
		off := h.src
		if r.Dir == Egress {
			off = h.dst
		}
		out = append(out,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: h.size},
			&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID})
	}
	if r.Proto != 0 {
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{r.Proto}})
		if r.PortLo != 0 {
			out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
			if r.PortLo == r.PortHi {
				out = append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(r.PortLo)})
			} else {
				out = append(out,
					&expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: binaryutil.BigEndian.PutUint16(r.PortLo)},
					&expr.Cmp{Op: expr.CmpOpLte, Register: 1, Data: binaryutil.BigEndian.PutUint16(r.PortHi)})
			}
		}
	}
	if r.Named != "" {
		s, ok := sets[r.Named]
		if !ok {
			return nil, fmt.Errorf("no set %s", r.Named)
		}
		// daddr . l4proto . dport in consecutive 32-bit registers
		// (NFT_REG32_00 onwards; register 1 is the same storage).
		words := h.size / 4
		out = append(out,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: h.dst, Len: h.size},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 8 + words},
			&expr.Payload{DestRegister: 8 + words + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID})
	}
	if r.Counter != "" {
		out = append(out, &expr.Objref{Type: int(nftables.ObjTypeCounter), Name: r.Counter})
	}
	switch r.Verdict {
	case Accept:
		out = append(out, &expr.Verdict{Kind: expr.VerdictAccept})
	case Return:
		out = append(out, &expr.Verdict{Kind: expr.VerdictReturn})
	case Drop:
		out = append(out, &expr.Verdict{Kind: expr.VerdictDrop})
	}
	return out, nil
}

// nftSet is a Set's nftables set and elements.
func nftSet(tbl *nftables.Table, s Set) (*nftables.Set, []nftables.SetElement, error) {
	addrType := nftables.TypeIPAddr
	if s.Family == 6 {
		addrType = nftables.TypeIP6Addr
	}
	switch s.Kind {
	case SetAddrs:
		ns := &nftables.Set{Table: tbl, Name: s.Name, KeyType: addrType, Interval: true}
		var els []nftables.SetElement
		for _, r := range s.Ranges {
			els = append(els, nftables.SetElement{Key: r.First.AsSlice()})
			if next := r.Last.Next(); next.IsValid() {
				els = append(els, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
			}
		}
		return ns, els, nil
	case SetAddrPorts:
		kt, err := nftables.ConcatSetType(addrType, nftables.TypeInetProto, nftables.TypeInetService)
		if err != nil {
			return nil, nil, err
		}
		ns := &nftables.Set{Table: tbl, Name: s.Name, KeyType: kt, Concatenation: true}
		els := make([]nftables.SetElement, 0, len(s.AddrPorts))
		for _, e := range s.AddrPorts {
			k := append(e.Addr.AsSlice(), e.Proto, 0, 0, 0, byte(e.Port>>8), byte(e.Port), 0, 0)
			els = append(els, nftables.SetElement{Key: k})
		}
		return ns, els, nil
	}
	return nil, nil, fmt.Errorf("set %s: kind %d", s.Name, s.Kind)
}
