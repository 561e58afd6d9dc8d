package deploy

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/config"
)

// egressSelector is the part of EgressSelectorConfiguration the example
// uses (k8s.io/apiserver/pkg/apis/apiserver/v1beta1).
type egressSelector struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Selections []struct {
		Name       string `yaml:"name"`
		Connection struct {
			ProxyProtocol string `yaml:"proxyProtocol"`
			Transport     *struct {
				TCP *struct {
					URL       string `yaml:"url"`
					TLSConfig struct {
						CABundle   string `yaml:"caBundle"`
						ClientCert string `yaml:"clientCert"`
						ClientKey  string `yaml:"clientKey"`
					} `yaml:"tlsConfig"`
				} `yaml:"tcp"`
			} `yaml:"transport"`
		} `yaml:"connection"`
	} `yaml:"egressSelections"`
}

// The egress selector example points kube-apiserver's cluster traffic at
// a relay that the example gateway config accepts as its relay section:
// same address, TLS with client certificates.
func TestEgressSelectorExample(t *testing.T) {
	b, err := os.ReadFile("kube-apiserver/egress-selector.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var es egressSelector
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&es); err != nil {
		t.Fatal(err)
	}
	if es.APIVersion != "apiserver.k8s.io/v1beta1" || es.Kind != "EgressSelectorConfiguration" {
		t.Fatalf("apiVersion %q kind %q", es.APIVersion, es.Kind)
	}
	var relayURL *url.URL
	names := map[string]bool{}
	for _, s := range es.Selections {
		names[s.Name] = true
		if s.Name != "cluster" {
			continue
		}
		c := s.Connection
		if c.ProxyProtocol != "HTTPConnect" || c.Transport == nil || c.Transport.TCP == nil {
			t.Fatalf("cluster selection: want HTTPConnect over tcp, got %+v", c)
		}
		tc := c.Transport.TCP
		if tc.TLSConfig.CABundle == "" || tc.TLSConfig.ClientCert == "" || tc.TLSConfig.ClientKey == "" {
			t.Errorf("cluster selection: TLS needs caBundle, clientCert and clientKey: %+v", tc.TLSConfig)
		}
		if relayURL, err = url.Parse(tc.URL); err != nil || relayURL.Scheme != "https" {
			t.Fatalf("url %q: want https://HOST:PORT", tc.URL)
		}
	}
	for _, n := range []string{"cluster", "controlplane", "etcd"} {
		if !names[n] {
			t.Errorf("no %s selection", n)
		}
	}
	if relayURL == nil {
		t.Fatal("no cluster selection")
	}

	example, err := os.ReadFile("package/bridgehead.yaml.example")
	if err != nil {
		t.Fatal(err)
	}
	relay := "relay:\n  listen: " + relayURL.Host + "\n  allowedPorts: [10250]\n  tls:\n    certFile: relay.crt\n    keyFile: relay.key\n    clientCAFile: apiserver-ca.crt\n"
	text := strings.Replace(string(example), "\nsites:\n", "\n"+relay+"sites:\n", 1)
	if !strings.Contains(text, "relay:") {
		t.Fatal("could not place the relay section in the example")
	}
	cfg, err := config.Parse("bridgehead.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	problems, warnings := config.Check(cfg, config.CheckOptions{SkipPrivateKey: true})
	if len(problems) > 0 || len(warnings) > 0 {
		t.Errorf("the example with the relay at %s: problems %v, warnings %v", relayURL.Host, problems, warnings)
	}
	if gw := cfg.LocalGateway(); gw == nil || gw.Address != cfg.Relay.ListenAddr.Addr() {
		t.Errorf("the relay should listen on the local gateway's LAN address, got %s", cfg.Relay.ListenAddr)
	}
	if !strings.Contains(string(b), "listen: "+relayURL.Host) {
		t.Errorf("the comment's relay section does not listen on %s", relayURL.Host)
	}
}
