package config

import (
	"os"

	"gopkg.in/yaml.v3"
)

const kubeFieldKubeconfig = "kubernetes.kubeconfig"

// Kubernetes lets the gateway register itself: it publishes its public
// key, endpoint and readiness into its Gateway object's status (package
// kube/register). Off when the section is absent (Config.Kubernetes nil).
// It is read at start: a reload that changes it is refused (a restart
// applies it).
type Kubernetes struct {
	// Kubeconfig is the gateway's own credential (it may write only its
	// Gateway's status); a relative path is taken relative to the config
	// file.
	Kubeconfig string `yaml:"kubeconfig"`
	// Gateway is the Gateway object's name (default "<site>.<gateway>",
	// how `catalog to-resources` names it).
	Gateway string `yaml:"gateway"`
}

// KubeconfigPath is Kubernetes.Kubeconfig resolved against the config
// file's directory; "" when the section is absent.
func (c *Config) KubeconfigPath() string {
	if c.Kubernetes == nil {
		return ""
	}
	return c.RelayPath(c.Kubernetes.Kubeconfig)
}

func (d *decoder) kubernetes(n *yaml.Node, path string, c *Config) {
	k := &Kubernetes{}
	c.Kubernetes = k
	d.mapping(n, path, []field{
		{"kubeconfig", d.str(&k.Kubeconfig)},
		{"gateway", d.str(&k.Gateway)},
	})
}

// kubernetesDefaults names the Gateway object after the site and gateway
// (kube.GatewayName; config cannot import kube).
func kubernetesDefaults(c *Config) {
	if c.Kubernetes != nil && c.Kubernetes.Gateway == "" && c.Site != "" && c.Gateway != "" {
		c.Kubernetes.Gateway = c.Site + "." + c.Gateway
	}
}

// checkKubernetes (Parse): the section names a kubeconfig.
func checkKubernetes(c *Config, r *reporter) {
	if c.Kubernetes != nil && c.Kubernetes.Kubeconfig == "" {
		r.errorf(kubeFieldKubeconfig, "is required when kubernetes is set: the gateway's own kubeconfig file")
	}
}

// checkKubernetesFiles (Check, on the gateway): the kubeconfig file is
// there to read.
func checkKubernetesFiles(c *Config, r *reporter, opts CheckOptions) {
	if c.Kubernetes == nil || c.Kubernetes.Kubeconfig == "" || opts.SkipPrivateKey {
		return
	}
	if _, err := os.ReadFile(c.KubeconfigPath()); err != nil {
		r.errorf(kubeFieldKubeconfig, "cannot read the kubeconfig: %v", err)
	}
}
