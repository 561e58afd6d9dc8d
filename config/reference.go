package config

import (
	"fmt"
	"strings"

	"github.com/bridgehead/bridgehead/relay"
	"github.com/bridgehead/bridgehead/router/fq"
)

// FieldRule is what the reference (docs/reference/config.md) says about
// one field beyond its doc comment: the value its absence means and the
// values it takes. Every entry is built from the constants the decoder,
// applyDefaults, the accessors and the checks use, so the reference and
// the validator read one source.
type FieldRule struct {
	// Path is the field's YAML path, lists as "[]": "sites[].probeInterval".
	Path string
	// Default is what an absent field means ("" when it is required or
	// has no default).
	Default string
	// Values are the values it takes: a range, a list, a limit.
	Values string
}

// FieldRules lists the rule of every field that has a default or a bound.
func FieldRules() []FieldRule {
	rng := func(lo, hi any) string { return fmt.Sprintf("%v..%v", lo, hi) }
	return []FieldRule{
		{Path: "site", Values: "a site name in sites (required)"},
		{Path: "gateway", Values: "a gateway name of that site (required; `run --gateway` replaces it)"},
		{Path: "privateKeyFile", Values: "a file of mode 0600 holding a base64 X25519 key (required)"},
		{Path: "keyOverlap", Default: DefaultKeyOverlap.String(), Values: rng(MinKeyOverlap, MaxKeyOverlap)},
		{Path: "presharedKeys[].file", Values: fmt.Sprintf("a file of mode 0600 with 1 to %d base64 keys, one a line", maxPresharedKeys)},
		{Path: "listen", Default: DefaultListen, Values: "IP:port, port 1..65535"},
		{Path: "cipher", Default: DefaultCipher, Values: strings.Join([]string{CipherAESGCM, CipherChaChaPoly}, ", ")},
		{Path: "interface.name", Default: DefaultInterfaceName, Values: fmt.Sprintf("a Linux interface name, at most %d characters", maxIfNameLen)},
		{Path: "interface.mtu", Default: fmt.Sprint(DefaultMTU), Values: rng(minMTU, maxMTU) + ", or auto"},
		{Path: "interface.offload", Default: "true"},
		{Path: "cluster.name", Default: DefaultClusterName},
		{Path: "metrics.listen", Default: "off", Values: "host:port"},
		{Path: "metrics.readyWindow", Values: "no longer used (check warns)"},
		{Path: "clampMSS", Default: "true"},
		{Path: "earlyDrop", Default: "true"},
		{Path: "lanes", Default: fmt.Sprintf("one per CPU, at most %d", MaxLanes), Values: rng(1, MaxLanes)},
		{Path: "express", Default: "true"},
		{Path: "expressPriority", Default: fmt.Sprintf("%d (0 without CAP_BPF or CAP_SYS_NICE)", DefaultExpressPriority), Values: rng(0, 99)},
		{Path: "codel.target", Default: fq.DefaultTarget.String(), Values: rng(MinCoDelTarget, MaxCoDelTarget) + ", below interval"},
		{Path: "codel.interval", Default: fq.DefaultInterval.String(), Values: rng(MinCoDelInterval, MaxCoDelInterval)},
		{Path: "relay", Default: "off"},
		{Path: "relay.listen", Values: "IP:port on the LAN side (required)"},
		{Path: "relay.allowedPorts", Default: fmt.Sprintf("[%d]", DefaultRelayPort), Values: "ports " + rng(relayPortMin, relayPortMax) + ", each once"},
		{Path: "relay.allowPodCIDRs", Default: "false"},
		{Path: "relay.maxConnections", Default: fmt.Sprint(DefaultRelayMaxConnections), Values: rng(1, maxRelayConnections)},
		{Path: "relay.maxConnectionsPerDestination", Default: fmt.Sprint(DefaultRelayMaxConnectionsPerDest), Values: rng(1, maxRelayConnections) + ", at most maxConnections"},
		{Path: "relay.idleTimeout", Default: DefaultRelayIdleTimeout.String()},
		{Path: "relay.headerTimeout", Default: DefaultRelayHeaderTimeout.String()},
		{Path: "relay.maxPendingPerSource", Default: fmt.Sprint(relay.DefaultMaxPendingPerSource), Values: rng(1, maxRelayConnections)},
		{Path: "lan", Default: "off"},
		{Path: "lan.interface", Values: fmt.Sprintf("a Linux interface name, at most %d characters, not interface.name", maxIfNameLen)},
		{Path: "lan.targets", Values: fmt.Sprintf("at most %d unicast addresses, each once", maxLANTargets)},
		{Path: "lan.targetTimeout", Default: DefaultLANTargetTimeout.String(), Values: rng(minLANTargetTimeout, maxLANTargetTimeout)},
		{Path: "drain.timeout", Default: DefaultDrainTimeout.String(), Values: rng(MinDrainTimeout, MaxDrainTimeout)},
		{Path: "drain.quiet", Default: DefaultDrainQuiet.String(), Values: rng(MinDrainQuiet, MaxDrainTimeout) + ", at most timeout"},
		{Path: "kubernetes", Default: "off"},
		{Path: "kubernetes.inCluster", Default: "false", Values: "not with kubeconfig"},
		{Path: "kubernetes.gateway", Default: "<site>.<gateway>"},
		{Path: "kubernetes.follow", Default: "false", Values: "no inline sites with true"},
		{Path: "kubernetes.namespace", Default: DefaultCatalogNamespace, Values: "only with follow"},
		{Path: "kubernetes.catalogFile", Default: DefaultCatalogFile, Values: "only with follow"},
		{Path: "sites[].name", Values: fmt.Sprintf("letters, digits, '.', '_', '-', at most %d characters, unique", maxNameLen)},
		{Path: "sites[].keepalive", Default: "off (0)"},
		{Path: "sites[].probeInterval", Default: DefaultProbeInterval.String(), Values: rng(MinProbeInterval, MaxProbeInterval)},
		{Path: "sites[].via", Default: "every site with a gateway endpoint", Values: "site names"},
		{Path: "sites[].allowedSources", Default: "every site", Values: "site names, each once; [] for none"},
		{Path: "sites[].gateways[].name", Values: fmt.Sprintf("letters, digits, '.', '_', '-', at most %d characters, unique in its site", maxNameLen)},
		{Path: "sites[].gateways[].endpoint", Default: "none: behind NAT", Values: "host:port"},
		{Path: "sites[].gateways[].publicKey", Values: "base64 X25519 key, unique (required)"},
		{Path: "sites[].gateways[].previousKeyExpires", Values: "RFC 3339 time"},
	}
}
