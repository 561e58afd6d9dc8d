package config

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// relayAt replaces line 18 of the fixture (clampMSS) with itself and a
// relay section, whose first line is then line 19.
func relayAt(section string) map[int]string {
	return map[int]string{18: "clampMSS: false\n" + section}
}

func TestRelayDefaults(t *testing.T) {
	c := mustParse(t, relayAt("relay:\n  listen: 10.0.0.10:8131"))
	r := c.Relay
	if r == nil {
		t.Fatal("relay section not decoded")
	}
	if r.ListenAddr != netip.MustParseAddrPort("10.0.0.10:8131") || !slices.Equal(r.AllowedPorts, []int{10250}) ||
		r.AllowPodCIDRs || r.TLS != nil || r.MaxConnections != 1024 || r.MaxConnectionsPerDestination != 64 ||
		r.IdleTimeout != 10*time.Minute || r.HeaderTimeout != 10*time.Second {
		t.Errorf("defaults: %+v", *r)
	}
	if c := mustParse(t, nil); c.Relay != nil {
		t.Errorf("relay on without a relay section: %+v", *c.Relay)
	}
}

func TestRelayFull(t *testing.T) {
	c := mustParse(t, relayAt(`relay:
  listen: 10.0.0.10:8131
  allowedPorts: [10250, 10255]
  allowPodCIDRs: true
  tls:
    certFile: relay.crt
    keyFile: /etc/bridgehead/relay.key
    clientCAFile: ca.crt
  maxConnections: 10
  maxConnectionsPerDestination: 5
  idleTimeout: 1m
  headerTimeout: 3s`))
	r := c.Relay
	if !slices.Equal(r.AllowedPorts, []int{10250, 10255}) || !r.AllowPodCIDRs || r.MaxConnections != 10 ||
		r.MaxConnectionsPerDestination != 5 || r.IdleTimeout != time.Minute || r.HeaderTimeout != 3*time.Second {
		t.Errorf("decoded: %+v", *r)
	}
	if got := c.RelayPath(r.TLS.CertFile); got != "relay.crt" {
		// fixtureFile has no directory: relative paths stay as they are.
		t.Errorf("RelayPath = %q", got)
	}
	if got := c.RelayPath(r.TLS.KeyFile); got != "/etc/bridgehead/relay.key" {
		t.Errorf("RelayPath(abs) = %q", got)
	}
}

func TestRelayErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		section string
		want    []want
	}{
		{"no listen", "relay:\n  allowedPorts: [10250]", []want{{19, "relay.listen", "is required"}}},
		{"bad listen", "relay:\n  listen: gw:8131", []want{{20, "relay.listen", "not IP:port"}}},
		{"port zero", "relay:\n  listen: 10.0.0.10:0", []want{{20, "relay.listen", "port 0"}}},
		{"bad port", "relay:\n  listen: 10.0.0.10:8131\n  allowedPorts: [10250, 70000, http]",
			[]want{{21, "relay.allowedPorts[1]", "out of range"}, {21, "relay.allowedPorts[2]", "not a whole number"}}},
		{"duplicate port", "relay:\n  listen: 10.0.0.10:8131\n  allowedPorts: [10250, 10250]",
			[]want{{21, "relay.allowedPorts[1]", "listed twice"}}},
		{"limits", "relay:\n  listen: 10.0.0.10:8131\n  maxConnections: 10\n  maxConnectionsPerDestination: 20",
			[]want{{22, "relay.maxConnectionsPerDestination", "more than maxConnections"}}},
		{"zero limit", "relay:\n  listen: 10.0.0.10:8131\n  maxConnections: 0",
			[]want{{21, "relay.maxConnections", "out of range"}}},
		{"tls incomplete", "relay:\n  listen: 10.0.0.10:8131\n  tls:\n    certFile: a.crt",
			[]want{{21, "relay.tls.keyFile", "is required"}, {21, "relay.tls.clientCAFile", "is required"}}},
		{"unknown field", "relay:\n  listen: 10.0.0.10:8131\n  allowedPort: [1]",
			[]want{{21, "relay.allowedPort", `did you mean "allowedPorts"`}}},
		{"bad bool", "relay:\n  listen: 10.0.0.10:8131\n  allowPodCIDRs: yes please",
			[]want{{21, "relay.allowPodCIDRs", "not true or false"}}},
		{"bad duration", "relay:\n  listen: 10.0.0.10:8131\n  idleTimeout: 10",
			[]want{{21, "relay.idleTimeout", "not a duration"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFixture(t, relayAt(tc.section))
			if err == nil {
				t.Fatal("accepted")
			}
			matchErrors(t, asList(t, err), tc.want)
		})
	}
}

func TestRelayCheck(t *testing.T) {
	// The fixture's site b has node CIDR 10.1.0.0/16 (see testdata).
	c := mustParse(t, relayAt("relay:\n  listen: 0.0.0.0:8131"))
	problems, warnings := Check(c, CheckOptions{SkipPrivateKey: true})
	if len(problems) != 0 {
		t.Errorf("problems: %v", problems)
	}
	found := false
	for _, w := range warnings {
		if w.Field == "relay.listen" && w.Line == 20 {
			found = true
		}
	}
	if !found {
		t.Errorf("no warning for a relay on every address: %v", warnings)
	}

	remote := c.Sites[1].NodeCIDRs[0].Addr().Next()
	c = mustParse(t, relayAt("relay:\n  listen: "+netip.AddrPortFrom(remote, 8131).String()))
	problems, _ = Check(c, CheckOptions{SkipPrivateKey: true})
	if len(problems) != 1 || problems[0].Field != "relay.listen" || problems[0].Line != 20 {
		t.Errorf("relay inside a remote site: problems %v", problems)
	}

	c = mustParse(t, relayAt("relay:\n  listen: 10.0.0.10:8131\n  tls:\n    certFile: /nonexistent.crt\n    keyFile: /nonexistent.key\n    clientCAFile: /nonexistent.ca"))
	problems, _ = Check(c, CheckOptions{SkipPrivateKey: true})
	if len(problems) != 0 {
		t.Errorf("TLS files checked with SkipPrivateKey: %v", problems)
	}
	problems, _ = Check(c, CheckOptions{ReadFile: func(string) ([]byte, error) { return nil, nil }, SkipPrivateKey: false})
	var tlsProblem bool
	for _, p := range problems {
		if p.Field == "relay.tls" && p.Line == 21 {
			tlsProblem = true
		}
	}
	if !tlsProblem {
		t.Errorf("missing TLS files not reported: %v", problems)
	}
}
