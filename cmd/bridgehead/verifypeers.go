package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/verify"
	"github.com/bridgehead/bridgehead/verify/kubepeer"
)

// peerRun is verify --peers: this pod's peer socket and the other pods
// of its run. Used by verifyCluster's goroutine.
type peerRun struct {
	sock  *verify.PeerSocket
	self  netip.Addr
	found kubepeer.Found
	co    clusterFlags
}

// startPeers opens the peer socket (so that the others can reach this
// pod while it looks for them) and waits for the run's pods.
func startPeers(stdout io.Writer, co clusterFlags, kubeconfig, site string, sites []config.Site) (*peerRun, error) {
	self := co.podAddr
	if !self.IsValid() {
		a, err := netip.ParseAddr(os.Getenv("POD_IP"))
		if err != nil {
			return nil, usageError{fmt.Errorf("--peers: pass --pod-address, or set $POD_IP (the downward API's status.podIP)")}
		}
		self = a.Unmap()
	}
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if ns == "" || name == "" {
		return nil, usageError{fmt.Errorf("--peers: set $POD_NAMESPACE and $POD_NAME (the downward API's metadata.namespace and metadata.name)")}
	}
	client, err := kubeClient(kubeconfig)
	if err != nil {
		return nil, err
	}
	sock, err := verify.ListenPeers(netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(co.peerPort)))
	if err != nil {
		return nil, err
	}
	found, err := kubepeer.Peers(context.Background(), client, ns, co.peers, name, site, sites, co.peerWait)
	if err != nil {
		sock.Close()
		return nil, err
	}
	fmt.Fprintf(stdout, "verify run %s in %s: %s\n", name, site, found)
	return &peerRun{sock: sock, self: self, found: found, co: co}, nil
}

func (r *peerRun) addrs() []netip.Addr {
	var out []netip.Addr
	for _, p := range r.found.Peers {
		out = append(out, p.Addr)
	}
	return out
}

func (r *peerRun) missing() []string { return r.found.Missing }

// finish stays up, answering, until every peer has finished with this
// pod, or --peer-wait passes.
func (r *peerRun) finish(stdout io.Writer) {
	var dsts []netip.AddrPort
	for _, a := range r.addrs() {
		dsts = append(dsts, netip.AddrPortFrom(a, uint16(r.co.peerPort)))
	}
	if missing := r.sock.Finish(context.Background(), dsts, r.co.peerWait); len(missing) > 0 {
		fmt.Fprintf(stdout, "stopped waiting after %s for peers to finish: %v\n", r.co.peerWait, missing)
	}
}
