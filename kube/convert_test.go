package kube

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/config"
)

// filler sets every field of a config value to a distinct non-zero value
// that the conversion can carry. A field of a type it does not know fails
// the test: a new config field must be taught here and mapped in
// FromConfig/ToConfig before the test passes again.
type filler struct {
	t *testing.T
	n int
}

var (
	addrType     = reflect.TypeFor[netip.Addr]()
	prefixType   = reflect.TypeFor[netip.Prefix]()
	durationType = reflect.TypeFor[time.Duration]()
)

func (f *filler) fill(v reflect.Value, path string) {
	f.n++
	n := f.n
	six := strings.HasSuffix(path, "6")
	switch {
	case v.Type() == addrType:
		a := netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), 1})
		if six {
			a = netip.AddrFrom16([16]byte{0: 0xfd, 1: 0, 2: byte(n >> 8), 3: byte(n), 15: 1})
		}
		v.Set(reflect.ValueOf(a))
		return
	case v.Type() == prefixType:
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), 0}), 24)
		if six {
			p = netip.PrefixFrom(netip.AddrFrom16([16]byte{0: 0xfd, 1: 1, 2: byte(n >> 8), 3: byte(n)}), 64)
		}
		v.Set(reflect.ValueOf(p))
		return
	case v.Type() == durationType:
		v.SetInt(int64(n) * int64(time.Second))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("x%d", n))
	case reflect.Int:
		v.SetInt(int64(n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem(), path)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			f.fill(s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			if sf.Tag.Get("yaml") == "-" {
				continue // derived by config.Parse, not part of the model
			}
			if sf.Name == "PreviousPublicKey" || sf.Name == "PreviousKeyExpires" {
				continue // a key rollover: signed Gateway status, not the catalog's model (keys.go, TestGatewayKeysRollover)
			}
			if !sf.IsExported() {
				f.t.Fatalf("%s.%s: unexported field in the config model", path, sf.Name)
			}
			f.fill(v.Field(i), path+"."+sf.Name)
		}
	default:
		f.t.Fatalf("%s: config field of type %s: teach this test's filler and map it in FromConfig/ToConfig", path, v.Type())
	}
}

// TestRoundTripEveryField keeps the catalog and the resources one model:
// every field of config.Site, Gateway, Node and Relay set, through
// FromConfig and ToConfig, comes back equal.
func TestRoundTripEveryField(t *testing.T) {
	f := &filler{t: t}
	c := &config.Config{}
	var sites []config.Site
	f.fill(reflect.ValueOf(&sites).Elem(), "sites")
	c.Sites = sites
	c.Relay = &config.Relay{}
	f.fill(reflect.ValueOf(c.Relay).Elem(), "relay")
	// The relay listens on the local gateway's address (see doc.go).
	c.Site, c.Gateway = c.Sites[1].Name, c.Sites[1].Gateways[0].Name
	c.Relay.Listen = netip.AddrPortFrom(c.Sites[1].Gateways[0].Address, 8131).String()

	r, err := FromConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ToConfig(r, Local{Site: c.Site, Gateway: c.Gateway})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Sites, c.Sites) {
		t.Errorf("sites differ after the round trip:\n got %+v\nwant %+v", back.Sites, c.Sites)
	}
	if !reflect.DeepEqual(back.Relay, c.Relay) {
		t.Errorf("relay differs after the round trip:\n got %+v\nwant %+v", back.Relay, c.Relay)
	}
	if n, want := len(r.Gateways), 4; n != want {
		t.Errorf("%d Gateways, want %d", n, want)
	}
	if g := r.Gateways[0]; g.Name != GatewayName(c.Sites[0].Name, c.Sites[0].Gateways[0].Name) || g.Spec.Site != c.Sites[0].Name {
		t.Errorf("gateway 0 is %s of site %s", g.Name, g.Spec.Site)
	}
}

func TestFromConfigRefuses(t *testing.T) {
	gw := config.Gateway{Name: "gw1", Address: netip.MustParseAddr("10.1.0.5")}
	tests := []struct {
		name string
		c    config.Config
		want string
	}{
		{"site name", config.Config{Sites: []config.Site{{Name: "East_1"}}}, `sites[0].name: "East_1" is not a valid Kubernetes name`},
		{"gateway name", config.Config{Sites: []config.Site{{Name: "east", Gateways: []config.Gateway{{Name: "GW"}}}}}, `sites[0].gateways[0].name: "east.GW"`},
		{"node name", config.Config{Sites: []config.Site{{Name: "east", Nodes: []config.Node{{Name: "n_1"}}}}}, `sites[0].nodes[0].name`},
		{"relay elsewhere", config.Config{Site: "east", Gateway: "gw1", Relay: &config.Relay{Listen: "10.1.0.9:8131"},
			Sites: []config.Site{{Name: "east", Gateways: []config.Gateway{gw}}}}, "relay.listen: 10.1.0.9:8131 is not the address of gateway"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromConfig(&tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FromConfig: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestBlockSizes(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		nodes  []config.Node
		v4, v6 int32
	}{
		{nil, 24, 80},
		{[]config.Node{{PodCIDR: p("10.0.0.0/26")}, {PodCIDR: p("10.0.0.64/26"), PodCIDR6: p("fd00::/96")}}, 26, 96},
		{[]config.Node{{PodCIDR: p("10.0.0.0/26")}, {PodCIDR: p("10.0.1.0/24")}}, 24, 80},
	}
	for i, tc := range tests {
		if v4, v6 := blockSizes(tc.nodes); v4 != tc.v4 || v6 != tc.v6 {
			t.Errorf("%d: blockSizes = %d, %d, want %d, %d", i, v4, v6, tc.v4, tc.v6)
		}
	}
}
