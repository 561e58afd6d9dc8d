package config

import (
	"net/netip"
	"runtime"
	"time"
)

// Defaults applied by Load where the file leaves a field out.
const (
	DefaultListen        = "0.0.0.0:51820"
	DefaultCipher        = "aesgcm"
	DefaultInterfaceName = "bh0"
	DefaultMTU           = 1420
	DefaultClusterName   = "bridgehead"

	// Probe intervals (Site.ProbeInterval); the router enforces the
	// same bounds (a daemon test keeps them equal).
	DefaultProbeInterval = 200 * time.Millisecond
	MinProbeInterval     = 50 * time.Millisecond
	MaxProbeInterval     = 30 * time.Second
)

// Config is one loaded configuration file. It is immutable once Load
// returns: a reload builds a new Config and the daemon swaps it in whole.
//
// Field names in the YAML file are the yaml tags; they are the operator's
// interface and must not change.
type Config struct {
	// Path is the file the config was loaded from (not part of the YAML).
	Path string `yaml:"-"`

	// Site is the name of this gateway's site, one of sites.
	Site string `yaml:"site"`
	// Gateway is this gateway's name in its site.
	Gateway string `yaml:"gateway"`
	// PrivateKeyFile holds this gateway's static private key, base64,
	// as `bridgehead genkey` writes it; a relative path is taken
	// relative to the config file.
	PrivateKeyFile string `yaml:"privateKeyFile"`
	// Listen is the UDP IP:port the gateway receives tunnel traffic on.
	Listen string `yaml:"listen"`
	// Cipher is the AEAD of the data path; every gateway of the cluster
	// uses the same.
	Cipher string `yaml:"cipher"`
	// Interface configures the TUN device.
	Interface Interface `yaml:"interface"`
	// Cluster holds cluster-wide facts shared by every site.
	Cluster Cluster `yaml:"cluster"`
	// Metrics configures the HTTP endpoint of /metrics, /healthz and
	// /readyz.
	Metrics Metrics `yaml:"metrics"`
	// ControlSocket is the Unix socket `bridgehead status` and
	// `bridgehead verify` read the running gateway from.
	ControlSocket string `yaml:"controlSocket"`
	// PreviousPrivateKeyFile holds the key before a rollover, answered
	// until the local gateway's previousKeyExpires (keys_rollover.go).
	PreviousPrivateKeyFile string `yaml:"previousPrivateKeyFile"`
	// KeyOverlap is how long a previous key stays in use when no
	// previousKeyExpires says (DefaultKeyOverlap when zero).
	KeyOverlap time.Duration `yaml:"keyOverlap"`
	// PresharedKeys names the preshared-key file of each remote site
	// this gateway shares one with (keys_rollover.go).
	PresharedKeys []PresharedKeyRef `yaml:"presharedKeys"`
	// ClampMSS rewrites the MSS option of TCP SYNs crossing the tunnel.
	// nil means the default (on).
	ClampMSS *bool `yaml:"clampMSS"`
	// EarlyDrop attaches an eBPF socket filter that drops datagrams that
	// cannot be bridgehead messages in the kernel (package earlydrop).
	// nil means the default (on); without the capability or kernel
	// support the gateway runs without it and says so in the log.
	EarlyDrop *bool `yaml:"earlyDrop"`
	// Lanes is how many data-path lanes the gateway runs (router.Lane:
	// a TUN queue and a socket each, one sealer and one opener); 0 (the
	// field absent) means one per CPU, at most MaxLanes. See LaneCount.
	Lanes int `yaml:"lanes"`
	// Express runs the express lane: one more socket on the listen port
	// and one more TUN queue, for the peers' sparse flows (pings, DNS,
	// API calls), so that they do not wait behind a bulk flow at the
	// receiver (router.Options.Express). nil means the default (on).
	Express *bool `yaml:"express"`
	// ExpressPriority, 1-99, makes the kernel sort flows (a TUN steering
	// program, package steer; needs CAP_BPF) and runs the express lane's
	// two loops on SCHED_FIFO threads of that priority, so that a sparse
	// packet is handled as soon as it arrives even when the bulk lanes
	// keep every core busy (router.Options.ExpressSteered and
	// ExpressPriority); 0 keeps the readers sorting flows and ordinary
	// threads. nil means DefaultExpressPriority (10), or 0 when the process
	// lacks CAP_BPF or CAP_SYS_NICE (one log line at start). Set
	// explicitly without CAP_SYS_NICE, the gateway logs a warning and
	// runs ordinary threads.
	ExpressPriority *int `yaml:"expressPriority"`
	// CoDel tunes the inside path's fair queue (package router/fq): a
	// flow whose packets wait longer than Target for an Interval gets
	// its head packets dropped or ECN-marked. Zero keeps fq's defaults
	// (fq.DefaultTarget 2 ms, fq.DefaultInterval 20 ms). Read at start.
	CoDel CoDel `yaml:"codel"`
	// Relay is the HTTP CONNECT relay for API-server callbacks; nil
	// (section absent) means off. See relay.go. With kubernetes.follow
	// it may come from the followed catalog file instead (the Site's
	// published relay), never from both.
	Relay *Relay `yaml:"relay"`
	// LAN names the interface toward the gateway's own site, which the
	// gateway watches so it stops taking traffic it cannot deliver; nil
	// (section absent) means no watch.
	LAN *LAN `yaml:"lan"`
	// Drain is how the gateway stops on SIGTERM (drain.go); the zero
	// value (section absent) means the defaults.
	Drain Drain `yaml:"drain"`
	// Kubernetes publishes this gateway's key and readiness into its
	// Gateway object; nil (section absent) means off. See kubernetes.go.
	Kubernetes *Kubernetes `yaml:"kubernetes"`
	// Sites lists every site of the cluster, this gateway's own too
	// (with kubernetes.follow they come from the catalog file instead).
	Sites []Site `yaml:"sites"`

	// ListenAddr is Listen parsed.
	ListenAddr netip.AddrPort `yaml:"-"`

	// hash is Hash(); lines maps field paths ("sites[0].name") to the
	// line they were read from. Both are set by Parse and never changed.
	hash  string
	lines map[string]int
	// relayFromCatalog: Relay was read from the followed catalog file
	// (set by Parse, never changed), so its problems name that file.
	relayFromCatalog bool
}

// Interface configures the TUN device.
type Interface struct {
	// Name is the TUN device's name.
	Name string `yaml:"name"`
	// MTU is a number or "auto" (derived from the WAN interface).
	MTU MTU `yaml:"mtu"`
	// Offload opens the TUN with TSO/USO and GRO (nil means the default,
	// on); false forces the portable backend, one packet per system call.
	Offload *bool `yaml:"offload"`
}

// MTU is either a fixed value or Auto.
type MTU struct {
	Value int
	Auto  bool
	// Default: the file left mtu out and Value is DefaultMTU, which the
	// daemon lowers by the relay header on a gateway that can be relayed
	// (CanBeRelayed); a value the operator wrote is used as written.
	Default bool
}

// Cluster holds cluster-wide facts shared by every site.
type Cluster struct {
	// Name goes into the handshake prologue: gateways of different
	// clusters cannot talk to each other even if keys leak across.
	Name string `yaml:"name"`
	// ServiceCIDRs are the cluster's Service ranges; check keeps them
	// apart from every node and pod CIDR.
	ServiceCIDRs []netip.Prefix `yaml:"serviceCIDRs"`
	// DNSServiceIP is the cluster DNS Service's address, inside a
	// service CIDR.
	DNSServiceIP netip.Addr `yaml:"dnsServiceIP"`
}

// LAN is the gateway's side toward its own site's nodes. While the
// interface is down, or the kernel would not send some nodeCIDR of the
// site through it, the gateway cannot deliver: /readyz answers 503 and
// remote gateways move its flows to the site's other gateways. A
// reload applies a change.
type LAN struct {
	// Interface is the LAN interface's name.
	Interface string `yaml:"interface"`
	// Targets are LAN-side addresses that answer ICMP echo (a node, the
	// site's router). When set, the gateway pings each of them through
	// the LAN interface every 100 ms and cannot deliver while none has
	// answered for TargetTimeout: this catches a LAN that is up with
	// routes but passes nothing (a dead switch port, a VLAN or NSG
	// change). Optional.
	Targets []netip.Addr `yaml:"targets"`
	// TargetTimeout is how long every target may stay silent
	// (DefaultLANTargetTimeout when zero).
	TargetTimeout time.Duration `yaml:"targetTimeout"`
}

// DefaultLANTargetTimeout is lan.targetTimeout's default: five pings
// lost in a row, well inside the second in which remote gateways must
// move this gateway's flows.
const DefaultLANTargetTimeout = 500 * time.Millisecond

// LANTargetTimeout is lan.targetTimeout or its default.
func (l *LAN) LANTargetTimeout() time.Duration {
	if l == nil || l.TargetTimeout == 0 {
		return DefaultLANTargetTimeout
	}
	return l.TargetTimeout
}

// Metrics configures the HTTP endpoint serving /metrics, /healthz, /readyz.
type Metrics struct {
	// Listen is the host:port of the HTTP endpoint; empty: none.
	Listen string `yaml:"listen"`
	// ReadyWindow is no longer used: a site is reachable while one of
	// its gateways is up, which probes decide (Site.ProbeInterval).
	// Check warns when it is set, so old configs keep loading.
	ReadyWindow time.Duration `yaml:"readyWindow"`
}

// Site is one location of the cluster: its address plan and gateways.
type Site struct {
	// Name names the site in metrics, logs and routes.
	Name string `yaml:"name"`
	// NodeCIDRs are the ranges of the site's node addresses.
	NodeCIDRs []netip.Prefix `yaml:"nodeCIDRs"`
	// PodCIDRs are the ranges of the site's pod addresses.
	PodCIDRs []netip.Prefix `yaml:"podCIDRs"`
	// RouterAddress, when set, is the address nodes of this site route
	// remote traffic to (a load-balancer VIP in front of the gateways).
	RouterAddress netip.Addr `yaml:"routerAddress"`
	// RouterAddress6 is the IPv6 counterpart of RouterAddress: Linux
	// cannot route IPv6 destinations via an IPv4 next hop.
	RouterAddress6 netip.Addr `yaml:"routerAddress6"`
	// Keepalive is the interval of keepalive messages to this site's
	// gateways; zero disables them.
	Keepalive time.Duration `yaml:"keepalive"`
	// ProbeInterval is how long one of this site's gateways may stay
	// silent before the others probe it; three silent intervals mark it
	// down and its flows move to the site's other gateways (default
	// DefaultProbeInterval, from MinProbeInterval to MaxProbeInterval).
	ProbeInterval time.Duration `yaml:"probeInterval"`
	// Via names the hub sites this site relays through toward sites it
	// cannot reach directly (both without gateway endpoints); empty
	// means every site with a gateway endpoint (see hubs.go).
	Via []string `yaml:"via"`
	// Gateways are the site's gateways; remote sites spread their flows
	// over those that are up.
	Gateways []Gateway `yaml:"gateways"`
	// Nodes are the site's nodes with the pod range of each, for the
	// routes `bridgehead routes` and the node agent install.
	Nodes []Node `yaml:"nodes"`

	// AllowedSources: the remote sites whose pods may reach this site
	// (sitepolicy.go); nil: every site, empty: none.
	AllowedSources SiteSources `yaml:"allowedSources,omitempty"`
}

// Gateway is one bridgehead instance of a site.
type Gateway struct {
	// Name is the gateway's name in its site.
	Name string `yaml:"name"`
	// Address is the gateway's LAN address inside its site's node CIDRs.
	Address netip.Addr `yaml:"address"`
	// Address6 is the gateway's IPv6 LAN address, the next hop of the
	// site's nodes toward remote IPv6 CIDRs.
	Address6 netip.Addr `yaml:"address6"`
	// Endpoint is host:port where peers send tunnel traffic; empty for
	// a gateway behind NAT, which opens its sessions itself (hubs.go).
	Endpoint string `yaml:"endpoint"`
	// PublicKey is the gateway's static public key, base64 (`bridgehead
	// pubkey` prints it).
	PublicKey string `yaml:"publicKey"`
	// PreviousPublicKey is the gateway's key before a rollover, accepted
	// by its peers until PreviousKeyExpires (keys_rollover.go).
	PreviousPublicKey string `yaml:"previousPublicKey"`
	// PreviousKeyExpires ends the rollover: peers refuse
	// PreviousPublicKey after it.
	PreviousKeyExpires time.Time `yaml:"previousKeyExpires"`

	// EndpointAddr is Endpoint resolved.
	EndpointAddr netip.AddrPort `yaml:"-"`
}

// Node is a node of a site with the pod range carved for it.
type Node struct {
	// Name is the node's name (its Kubernetes Node name).
	Name string `yaml:"name"`
	// Address is the node's address, inside the site's node CIDRs.
	Address netip.Addr `yaml:"address"`
	// PodCIDR is the node's pod range, inside the site's pod CIDRs.
	PodCIDR netip.Prefix `yaml:"podCIDR"`
	// Address6 is a dual-stack node's IPv6 address.
	Address6 netip.Addr `yaml:"address6"`
	// PodCIDR6 is a dual-stack node's IPv6 pod range.
	PodCIDR6 netip.Prefix `yaml:"podCIDR6"`
}

// CoDel is the codel section (Config.CoDel).
type CoDel struct {
	// Target is the queueing delay a flow may keep.
	Target time.Duration `yaml:"target"`
	// Interval is how long a flow may stay above Target before its
	// head packets are dropped or ECN-marked.
	Interval time.Duration `yaml:"interval"`
}

// Bounds of codel.target and codel.interval.
const (
	MinCoDelTarget   = 100 * time.Microsecond
	MaxCoDelTarget   = time.Second
	MinCoDelInterval = time.Millisecond
	MaxCoDelInterval = 10 * time.Second
)

// MaxLanes is the most lanes (Config.Lanes) a gateway runs.
const MaxLanes = 64

// LaneCount is Lanes, or with Lanes unset the number of CPUs (at most
// MaxLanes).
func (c *Config) LaneCount() int {
	if c.Lanes > 0 {
		return c.Lanes
	}
	return min(runtime.NumCPU(), MaxLanes)
}

// OffloadEnabled reports whether the TUN should use kernel offloads
// (default true).
func (c *Config) OffloadEnabled() bool {
	return c.Interface.Offload == nil || *c.Interface.Offload
}
