package config

import (
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// referenceMinimal is a config that leaves out every field with a
// default, with the optional sections present and empty but for what
// they require.
const referenceMinimal = `site: a
gateway: gw-a1
privateKeyFile: a.key
relay:
  listen: 10.0.0.10:8131
lan:
  interface: eth1
drain: {}
kubernetes:
  kubeconfig: gw.kubeconfig
sites:
  - name: a
    nodeCIDRs: [10.0.0.0/24]
    gateways:
      - name: gw-a1
        address: 10.0.0.10
        endpoint: 198.51.100.1:51820
        publicKey: SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4=
`

// TestFieldRuleDefaults holds every default FieldRules documents to what
// Load applies and the accessors return for a config that leaves the
// field out, so the reference cannot promise a default the code does not
// give.
func TestFieldRuleDefaults(t *testing.T) {
	l := loader{}
	c, err := l.parse("ref.yaml", []byte(referenceMinimal))
	if err != nil {
		t.Fatal(err)
	}
	bare := strings.Split(referenceMinimal, "relay:")[0] + "sites:" + strings.SplitN(referenceMinimal, "sites:", 2)[1]
	c0, err := l.parse("bare.yaml", []byte(bare))
	if err != nil {
		t.Fatal(err)
	}
	follow := &Config{Kubernetes: &Kubernetes{Follow: true}}
	kubernetesDefaults(follow)
	off := func(absent bool) string {
		if absent {
			return "off"
		}
		return "on"
	}
	got := map[string]func() string{
		"keyOverlap":        func() string { return c.KeyOverlapOrDefault().String() },
		"listen":            func() string { return c.Listen },
		"cipher":            func() string { return c.Cipher },
		"interface.name":    func() string { return c.Interface.Name },
		"interface.mtu":     func() string { return fmt.Sprint(c.Interface.MTU.Value) },
		"interface.offload": func() string { return fmt.Sprint(c.OffloadEnabled()) },
		"cluster.name":      func() string { return c.Cluster.Name },
		"metrics.listen":    func() string { return off(c.Metrics.Listen == "") },
		"clampMSS":          func() string { return fmt.Sprint(c.ClampMSSEnabled()) },
		"earlyDrop":         func() string { return fmt.Sprint(c.EarlyDropEnabled()) },
		"express":           func() string { return fmt.Sprint(c.ExpressEnabled()) },
		"expressPriority": func() string {
			return fmt.Sprintf("%d (0 without CAP_BPF or CAP_SYS_NICE)", c.ExpressPriorityOrDefault())
		},
		"lanes":                              func() string { return lanesDefault(c) },
		"relay":                              func() string { return off(c0.Relay == nil) },
		"relay.allowedPorts":                 func() string { return fmt.Sprint(c.Relay.AllowedPorts) },
		"relay.allowPodCIDRs":                func() string { return fmt.Sprint(c.Relay.AllowPodCIDRs) },
		"relay.maxConnections":               func() string { return fmt.Sprint(c.Relay.MaxConnections) },
		"relay.maxConnectionsPerDestination": func() string { return fmt.Sprint(c.Relay.MaxConnectionsPerDestination) },
		"relay.idleTimeout":                  func() string { return c.Relay.IdleTimeout.String() },
		"relay.headerTimeout":                func() string { return c.Relay.HeaderTimeout.String() },
		"lan":                                func() string { return off(c0.LAN == nil) },
		"lan.targetTimeout":                  func() string { return c.LAN.LANTargetTimeout().String() },
		"drain.timeout":                      func() string { return c.DrainTimeout().String() },
		"drain.quiet":                        func() string { return c.DrainQuiet().String() },
		"kubernetes":                         func() string { return off(c0.Kubernetes == nil) },
		"kubernetes.inCluster":               func() string { return fmt.Sprint(c.Kubernetes.InCluster) },
		"kubernetes.gateway": func() string {
			return strings.Replace(strings.Replace(c.Kubernetes.Gateway, c.Site, "<site>", 1), c.Gateway, "<gateway>", 1)
		},
		"kubernetes.follow":      func() string { return fmt.Sprint(c.Kubernetes.Follow) },
		"kubernetes.namespace":   func() string { return follow.Kubernetes.Namespace },
		"kubernetes.catalogFile": func() string { return follow.Kubernetes.CatalogFile },
		"sites[].keepalive":      func() string { return fmt.Sprintf("off (%d)", c.Sites[0].Keepalive) },
	}
	// Defaults the packages that read these fields apply (router, fq,
	// relay), or that describe a meaning rather than a value.
	elsewhere := map[string]bool{
		"codel.target": true, "codel.interval": true, "relay.maxPendingPerSource": true,
		"sites[].probeInterval": true, "sites[].via": true, "sites[].allowedSources": true,
		"sites[].gateways[].endpoint": true,
	}
	for _, r := range FieldRules() {
		if r.Default == "" {
			continue
		}
		g, ok := got[r.Path]
		switch {
		case ok:
			if v := g(); v != r.Default {
				t.Errorf("%s: FieldRules says the default is %q; a config without it gets %q", r.Path, r.Default, v)
			}
		case !elsewhere[r.Path]:
			t.Errorf("%s: FieldRules gives a default (%q) this test does not check", r.Path, r.Default)
		}
	}
}

// lanesDefault describes LaneCount for a config without lanes.
func lanesDefault(c *Config) string {
	if c.Lanes != 0 || c.LaneCount() != min(runtime.NumCPU(), MaxLanes) {
		return fmt.Sprintf("lanes %d, LaneCount %d", c.Lanes, c.LaneCount())
	}
	return fmt.Sprintf("one per CPU, at most %d", MaxLanes)
}

// TestFieldRuleRanges holds every range FieldRules documents ("lo..hi")
// to the decoder and the checks: the bounds are accepted, a step outside
// either is refused at the field. A range qualified by another field
// ("at most maxConnections") is not tried at its upper bound.
func TestFieldRuleRanges(t *testing.T) {
	rangeRE := regexp.MustCompile(`^(\S+)\.\.([^,\s]+)`)
	tried := 0
	for _, r := range FieldRules() {
		m := rangeRE.FindStringSubmatch(r.Values)
		if m == nil {
			continue
		}
		tried++
		qualified := strings.Contains(r.Values, ",") && !strings.HasSuffix(r.Values, ", or auto")
		below, above := step(t, m[1], -1), step(t, m[2], +1)
		cases := []struct {
			value  string
			accept bool
		}{{m[1], true}, {below, false}, {above, false}}
		if !qualified {
			cases = append(cases, struct {
				value  string
				accept bool
			}{m[2], true})
		}
		for _, tc := range cases {
			field := strings.ReplaceAll(r.Path, "[]", "[0]")
			refused := problemAt(t, withField(t, r.Path, tc.value), field)
			if refused == tc.accept {
				t.Errorf("%s: %s (documented %s): refused %v, want %v", r.Path, tc.value, r.Values, refused, !tc.accept)
			}
		}
	}
	if tried < 10 {
		t.Fatalf("tried %d ranges; the pattern lost track of FieldRules", tried)
	}
}

// step is the value just below (-1) or above (+1) a bound: a duration
// one nanosecond off, an integer one off.
func step(t *testing.T, bound string, dir int) string {
	if d, err := time.ParseDuration(bound); err == nil {
		return (d + time.Duration(dir)).String()
	}
	n, err := strconv.Atoi(bound)
	if err != nil {
		t.Fatalf("bound %q is neither a duration nor an integer", bound)
	}
	return strconv.Itoa(n + dir)
}

// withField is referenceMinimal with the field at path (lists: their
// first element) set to value.
func withField(t *testing.T, path, value string) []byte {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(referenceMinimal), &doc); err != nil {
		t.Fatal(err)
	}
	n := doc.Content[0]
	parts := strings.Split(path, ".")
	for i, p := range parts {
		name, list := strings.CutSuffix(p, "[]")
		var v *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == name {
				v = n.Content[j+1]
			}
		}
		if i == len(parts)-1 {
			if v != nil {
				v.Kind, v.Tag, v.Value, v.Style = yaml.ScalarNode, "", value, 0
			} else {
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, &yaml.Node{Kind: yaml.ScalarNode, Value: value})
			}
			break
		}
		if v == nil {
			v = &yaml.Node{Kind: yaml.MappingNode}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, v)
		}
		if list {
			v = v.Content[0]
		}
		n = v
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// problemAt reports whether checking data finds a problem at field.
func problemAt(t *testing.T, data []byte, field string) bool {
	_, problems, _ := CheckData("range.yaml", data, CheckOptions{SkipPrivateKey: true})
	for _, p := range problems {
		if p.Field == field {
			return true
		}
	}
	return false
}
