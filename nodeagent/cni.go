package nodeagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// CNI defaults: where runtimes look for configs and plugins, and where
// the image keeps its copy of the reference plugins.
const (
	DefaultCNIConfDir     = "/etc/cni/net.d"
	DefaultCNIBinDir      = "/opt/cni/bin"
	DefaultCNIPluginsFrom = "/usr/lib/bridgehead/cni"
	// CNIConfName sorts before the usual configs ("10-...") so the
	// runtime picks it when several are present.
	CNIConfName    = "05-bridgehead.conflist"
	CNINetworkName = "bridgehead"
	DefaultBridge  = "bh-br0"
	// DefaultCatalogFile is where `bridgehead node --kubernetes` keeps
	// the catalog it follows, on the host: it survives the agent's pod
	// and a reboot (kubenode).
	DefaultCatalogFile = "/var/lib/bridgehead/catalog.yaml"
)

// CNIPlugins are the reference plugins the conflist uses.
var cniPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

// CNIPlugins returns the plugin binaries the conflist needs.
func CNIPlugins() []string { return append([]string(nil), cniPlugins...) }

// CNIOptions shape the conflist.
type CNIOptions struct {
	// Bridge is the node's pod bridge (DefaultBridge when empty).
	Bridge string
	// MTU of the bridge and pod interfaces; 0 leaves the plugin default.
	MTU int
	// IPAMDataDir is host-local's state directory; empty leaves the
	// plugin default (/var/lib/cni/networks).
	IPAMDataDir string
	// Coexist writes the config even though another CNI's is in the
	// directory (ForeignConfigs); without it the agent refuses, as a
	// second CNI silently losing to ours is worse than a node that says
	// why it is not Ready.
	Coexist bool
}

type cniRange struct {
	Subnet string `json:"subnet"`
}

type cniRoute struct {
	Dst string `json:"dst"`
}

type cniIPAM struct {
	Type    string       `json:"type"`
	Ranges  [][]cniRange `json:"ranges"`
	Routes  []cniRoute   `json:"routes,omitempty"`
	DataDir string       `json:"dataDir,omitempty"`
}

type cniBridge struct {
	Type             string  `json:"type"`
	Bridge           string  `json:"bridge"`
	IsGateway        bool    `json:"isGateway"`
	IsDefaultGateway bool    `json:"isDefaultGateway"`
	IPMasq           bool    `json:"ipMasq"`
	HairpinMode      bool    `json:"hairpinMode"`
	MTU              int     `json:"mtu,omitempty"`
	IPAM             cniIPAM `json:"ipam"`
}

type cniPortmap struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
}

type cniLoopback struct {
	Type string `json:"type"`
}

type cniConflist struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Plugins    []any  `json:"plugins"`
}

// Conflist renders the node's CNI network config (CNI spec 1.0.0): the
// bridge plugin with host-local IPAM over the node's pod blocks, the
// bridge as the pods' default gateway and no masquerading of its own
// (SNAT is the agent's nftables table), then portmap for hostPorts and
// loopback. The output is deterministic: the same model gives the same
// bytes, so an unchanged config is never rewritten.
func Conflist(d *Desired, o CNIOptions) ([]byte, error) {
	pods := d.PodCIDRs()
	if len(pods) == 0 {
		return nil, fmt.Errorf("node %q has no pod CIDR", d.Node)
	}
	if o.Bridge == "" {
		o.Bridge = DefaultBridge
	}
	ipam := cniIPAM{Type: "host-local", DataDir: o.IPAMDataDir}
	for _, p := range pods {
		ipam.Ranges = append(ipam.Ranges, []cniRange{{Subnet: p.String()}})
	}
	l := cniConflist{
		CNIVersion: CNIVersion,
		Name:       CNINetworkName,
		Plugins: []any{
			cniBridge{Type: "bridge", Bridge: o.Bridge, IsGateway: true, IsDefaultGateway: true,
				IPMasq: false, HairpinMode: true, MTU: o.MTU, IPAM: ipam},
			cniPortmap{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
			cniLoopback{Type: "loopback"},
		},
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory and a rename, so a reader (the container runtime) sees
// the old file or the new one, never a part. It reports false, and writes
// nothing, when path already holds data.
func writeFileAtomic(path string, data []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(mode)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return false, werr
	}
	return true, nil
}

// WriteConflist writes the conflist into confDir as CNIConfName, reporting
// whether the file changed.
func WriteConflist(confDir string, data []byte) (bool, error) {
	changed, err := writeFileAtomic(filepath.Join(confDir, CNIConfName), data, 0o644)
	if err != nil {
		return false, fmt.Errorf("write CNI config in %s: %w", confDir, err)
	}
	return changed, nil
}

// InstallPlugins copies each plugin of names missing from binDir out of
// from (atomically, mode 0755), and returns the ones it copied. A plugin
// already in binDir is left alone, whatever its version: the node's
// other CNI users may rely on it. A plugin missing from both is an error
// naming both directories.
func InstallPlugins(binDir, from string, names []string) ([]string, error) {
	var copied, missing []string
	for _, name := range names {
		dst := filepath.Join(binDir, name)
		if st, err := os.Stat(dst); err == nil && st.Mode().IsRegular() {
			continue
		}
		src := filepath.Join(from, name)
		in, err := os.Open(src)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, name)
			continue
		}
		if err != nil {
			return copied, fmt.Errorf("install CNI plugin %s: %w", name, err)
		}
		data, err := io.ReadAll(in)
		in.Close()
		if err != nil {
			return copied, fmt.Errorf("install CNI plugin %s: read %s: %w", name, src, err)
		}
		if _, err := writeFileAtomic(dst, data, 0o755); err != nil {
			return copied, fmt.Errorf("install CNI plugin %s into %s: %w", name, binDir, err)
		}
		copied = append(copied, name)
	}
	if len(missing) > 0 {
		return copied, fmt.Errorf("CNI plugins %v are neither in %s nor in %s", missing, binDir, from)
	}
	return copied, nil
}
