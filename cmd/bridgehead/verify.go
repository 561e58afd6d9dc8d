package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/control"
	"github.com/bridgehead/bridgehead/verify"
)

// setupVerify declares verify, which checks a running gateway end to end
// from its own host: the daemon, remote gateways, remote nodes' kubelet
// port, the path MTU, kernel routes and forwarding, the relay. Exit 1
// when a check fails.
func setupVerify(fs *flag.FlagSet) action {
	cfgPath := fs.String("config", defaultConfig, "config `FILE` of the gateway to verify")
	socket := fs.String("socket", "", "control socket `PATH` (default: the config's controlSocket)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 2*time.Second, "how long each probe waits for an answer (`DURATION`)")
	port := fs.Uint("port", 10250, "TCP `PORT` probed on remote nodes (the kubelet's)")
	var targets targetList
	fs.Var(&targets, "target", "probe this `ADDR` instead of the config's nodes (repeatable)")
	relayCert := fs.String("relay-cert", "", "client certificate `FILE` for a relay with mTLS")
	relayKey := fs.String("relay-key", "", "client key `FILE` for a relay with mTLS")
	relayCA := fs.String("relay-ca", "", "`FILE` with the CA of the relay's serving certificate")
	return noArgs(func(std *stdio) error {
		return verifyGateway(std.out, *cfgPath, *socket, *asJSON, *timeout, *port, targets, *relayCert, *relayKey, *relayCA)
	})
}

func verifyGateway(stdout io.Writer, cfgPath, socket string, asJSON bool, timeout time.Duration, port uint,
	targets targetList, relayCert, relayKey, relayCA string) error {
	if port == 0 || port > 65535 {
		return usageError{fmt.Errorf("--port %d: want 1-65535", port)}
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	sock := socket
	if sock == "" {
		sock = cfg.ControlSocket
		if sock == "" {
			sock = control.DefaultSocket
		}
	}
	o := verify.Options{
		Config: cfg, Net: verify.SystemNetwork{}, Timeout: timeout, Targets: targets, Port: uint16(port),
		Status: func(ctx context.Context) (*control.Status, error) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			st, err := control.Fetch(ctx, sock)
			if err != nil {
				return nil, statusError(sock, err)
			}
			return st, nil
		},
	}
	if relayCert != "" || relayKey != "" || relayCA != "" {
		o.RelayClient, err = relayClientTLS(relayCert, relayKey, relayCA)
		if err != nil {
			return err
		}
	}
	rep := verify.Run(context.Background(), o)
	if asJSON {
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
	} else {
		rep.WriteTable(stdout)
	}
	if !rep.OK() {
		return errReported
	}
	return nil
}

func relayClientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, usageError{fmt.Errorf("--relay-cert, --relay-key and --relay-ca go together")}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// targetList is a repeatable --target flag of IP addresses.
type targetList []netip.Addr

func (t *targetList) String() string {
	var s []string
	for _, a := range *t {
		s = append(s, a.String())
	}
	return strings.Join(s, ",")
}

func (t *targetList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not an IP address", f)
		}
		*t = append(*t, a.Unmap())
	}
	return nil
}
