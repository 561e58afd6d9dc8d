package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// lbWatch plays the load balancer in front of a site's gateways on a lab
// node, as an Azure internal load balancer with a /readyz health probe or
// keepalived would: every -interval it asks each gateway's /readyz and
// keeps only the gateways that answer 200 as next hops of the node's
// routes to -dests (ECMP over several). When none answers it leaves the
// routes as they are. It runs until SIGTERM.
func lbWatch(args []string) error {
	fs := flag.NewFlagSet("lb-watch", flag.ExitOnError)
	gws := fs.String("gateways", "", "comma-separated IPv4 LAN addresses of the gateways")
	gws6 := fs.String("gateways6", "", "their IPv6 addresses, in the same order")
	port := fs.Int("ready-port", 9641, "port of the gateways' /readyz")
	interval := fs.Duration("interval", 100*time.Millisecond, "probe interval")
	dests := fs.String("dests", "", "comma-separated destination prefixes")
	fs.Parse(args)
	v4, v6 := splitAddrs(*gws), splitAddrs(*gws6)
	if len(v4) == 0 || (len(v6) != 0 && len(v6) != len(v4)) {
		return fmt.Errorf("lb-watch: want -gateways, and -gateways6 of the same length if any")
	}
	var prefixes []netip.Prefix
	for _, d := range strings.Split(*dests, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(d))
		if err != nil {
			return fmt.Errorf("lb-watch: -dests: %w", err)
		}
		prefixes = append(prefixes, p)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	client := &http.Client{Timeout: *interval}
	var applied []bool
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		ready := make([]bool, len(v4))
		var wg sync.WaitGroup
		for i, a := range v4 {
			wg.Go(func() {
				resp, err := client.Get(fmt.Sprintf("http://%s/readyz", netip.AddrPortFrom(a, uint16(*port))))
				if err == nil {
					resp.Body.Close()
					ready[i] = resp.StatusCode == http.StatusOK
				}
			})
		}
		wg.Wait()
		if slices.Contains(ready, true) && !slices.Equal(ready, applied) {
			if err := setRoutes(prefixes, v4, v6, ready); err != nil {
				fmt.Fprintln(os.Stderr, "lb-watch:", err)
			} else {
				applied = ready
				fmt.Printf("%s ready %v\n", time.Now().UTC().Format(time.RFC3339Nano), ready)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func splitAddrs(s string) []netip.Addr {
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		if a, err := netip.ParseAddr(strings.TrimSpace(f)); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// setRoutes points every prefix at the ready gateways of its family.
func setRoutes(prefixes []netip.Prefix, v4, v6 []netip.Addr, ready []bool) error {
	for _, p := range prefixes {
		vias := v4
		args := []string{"route", "replace", p.String()}
		if p.Addr().Is6() {
			vias = v6
			args = append([]string{"-6"}, args...)
		}
		n := 0
		for i, a := range vias {
			if ready[i] {
				args = append(args, "nexthop", "via", a.String())
				n++
			}
		}
		if n == 0 {
			continue
		}
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}
