package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/kube/register"
)

// registerTimeout bounds one status write, so a publisher whose API
// server went away gives up and retries on its next tick.
const registerTimeout = 5 * time.Second

// kubeClient is the client of the kubernetes section (nil without
// one), made before the gateway touches the kernel so a bad kubeconfig
// fails the start cleanly. The section is read at start only: reload
// refuses to change it (restartOnly).
func kubeClient(cfg *config.Config) (dynamic.Interface, error) {
	if cfg.Kubernetes == nil {
		return nil, nil
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc.Timeout = registerTimeout
	client, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", cfg.Path, credential(cfg), err)
	}
	return client, nil
}

// restConfig is the client config of the kubernetes section: the
// kubeconfig file, or with inCluster the pod's ServiceAccount token
// (client-go re-reads the projected token file as the kubelet rotates
// it) and the API server the pod is given.
func restConfig(cfg *config.Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubernetes.InCluster {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.KubeconfigPath())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", cfg.Path, credential(cfg), err)
	}
	return rc, nil
}

// credential names the kubernetes section's credential in errors.
func credential(cfg *config.Config) string {
	if cfg.Kubernetes.InCluster {
		return "kubernetes.inCluster"
	}
	return "kubernetes.kubeconfig " + cfg.KubeconfigPath()
}

// newPublisher makes the publisher of this gateway's Gateway status
// (package kube/register); nil when client is nil. Its metric goes on
// the gateway's registry.
func newPublisher(cfg *config.Config, client dynamic.Interface, g *gateway, log *slog.Logger) (*register.Publisher, error) {
	if client == nil {
		return nil, nil
	}
	return register.New(register.Options{
		Client: client, Gateway: cfg.Kubernetes.Gateway, Source: g.registerStatus,
		Log: log, Registry: g.m.reg,
	})
}

// runPublisher runs p on its own goroutine until ctx ends and returns
// the function that stops it and waits for it. The publisher only reads
// the gateway's state (readiness, the router's atomics), and each write
// is bounded by registerTimeout, so an API server that is slow or away
// never holds up forwarding; it retries on its tick and logs only when
// publishing starts or stops working.
func runPublisher(ctx context.Context, p *register.Publisher) (stop func()) {
	if p == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx) // nil when ctx ends
	}()
	return func() { cancel(); <-done }
}

// registerStatus is what the gateway publishes: its key, its endpoint
// from the catalog, its readiness (/readyz; not ready either while the
// data path is wedged, /healthz) and how many remote gateways are up.
// Called from the publisher's goroutine; it reads only published state.
func (g *gateway) registerStatus() register.Status {
	now := time.Now()
	cfg := g.cfg.Load()
	rep := g.readiness(now)
	s := register.Status{PublicKey: g.r.KeyRing().Current.Public.String(), Ready: rep.Ready}
	s.PreviousPublicKey, s.PreviousKeyExpires, s.KeySignature = g.rotationStatus() // keys.go
	if gw := cfg.LocalGateway(); gw != nil {
		s.Endpoint = gw.Endpoint
	}
	var down []string
	for _, site := range rep.Sites {
		for _, gw := range site.Gateways {
			s.RemoteGateways++
			if gw.State == health.StateUp {
				s.RemoteUp++
			}
		}
		if !site.Ready {
			down = append(down, site.Site)
		}
	}
	switch err := g.r.Healthy(now); {
	case err != nil:
		s.Ready, s.Reason, s.Message = false, "DataPathWedged", err.Error()
	case rep.LAN != "":
		s.Reason, s.Message = "LANDown", rep.LAN
	case !rep.Ready:
		s.Reason, s.Message = "NoRemoteSite", "no gateway of "+strings.Join(down, ", ")+" is up"
	}
	return s
}
