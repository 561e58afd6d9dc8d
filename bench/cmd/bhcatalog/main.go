// Command bhcatalog writes a large generated bridgehead config (and the
// local gateway's private key) for scale measurements:
//
//	go run ./bench/cmd/bhcatalog -sites 200 -gateways 3 -prefixes 100000 -out /tmp/cat
//	bridgehead check -config /tmp/cat/bridgehead.yaml
//
// See package bench/catalog for the address plan.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/bridgehead/bridgehead/bench/catalog"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bhcatalog", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sites     = fs.Int("sites", 200, "number of sites")
		gateways  = fs.Int("gateways", 3, "gateways per site")
		prefixes  = fs.Int("prefixes", 100000, "pod prefixes over all sites (one node CIDR per site comes on top)")
		seed      = fs.String("seed", "bridgehead-catalog", "seed the keys are derived from")
		endpoint  = fs.String("endpoint-base", "198.18.0.1", "endpoint address of the first gateway; the others follow in order")
		port      = fs.Uint("port", 51820, "UDP port of every endpoint")
		keepalive = fs.Duration("keepalive", 0, "keepalive of every site (0: none)")
		nodes     = fs.Int("nodes", 0, "nodes listed per site, each with one of the site's pod prefixes")
		site      = fs.Int("site", 0, "index of the site the config is written for")
		gw        = fs.Int("gateway", 0, "index of the gateway (in its site) the config is written for")
		listen    = fs.String("listen", "", "listen address (default 0.0.0.0:PORT)")
		ctl       = fs.String("control-socket", "", "controlSocket to write (default: the daemon's)")
		out       = fs.String("out", ".", "directory to write the config and key file into")
		name      = fs.String("name", "bridgehead.yaml", "config file name")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	base, err := netip.ParseAddr(*endpoint)
	if err != nil || *port == 0 || *port > 65535 {
		fmt.Fprintf(stderr, "bhcatalog: bad -endpoint-base %q or -port %d\n", *endpoint, *port)
		return 2
	}
	start := time.Now()
	c, err := catalog.New(catalog.Options{Sites: *sites, Gateways: *gateways, Prefixes: *prefixes,
		Seed: *seed, EndpointBase: base, Port: uint16(*port), Keepalive: *keepalive, Nodes: *nodes})
	if err == nil {
		err = os.MkdirAll(*out, 0o755)
	}
	var path string
	if err == nil {
		path, err = c.Write(*out, *name, catalog.Local{Site: *site, Gateway: *gw, Listen: *listen, ControlSocket: *ctl})
	}
	if err != nil {
		fmt.Fprintf(stderr, "bhcatalog: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d sites x %d gateways, %d prefixes (%v)\n", path, *sites, *gateways, c.PrefixCount(), time.Since(start).Round(time.Millisecond))
	return 0
}
