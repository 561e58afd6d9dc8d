package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bridgehead/bridgehead/controller"
)

// controllerFlags are the flags of `bridgehead controller`.
type controllerFlags struct {
	kubeconfig, namespace, metricsListen, identity string
	leaderElect                                    bool
	leaseDuration, renewDeadline, retryPeriod      time.Duration
	releaseGrace, catalogInterval, auditInterval   time.Duration
	workers                                        int
	qps                                            float64
	burst                                          int
	logFormat, logLevel                            string
	azure                                          azureRouteFlags
}

// setupController declares controller, which assigns Nodes to Sites and
// allocates their pod blocks, leader-elected.
func setupController(fs *flag.FlagSet) action {
	f := newControllerFlags(fs)
	return noArgs(func(std *stdio) error {
		log, err := newLogger(std.err, f.logFormat, f.logLevel)
		if err != nil {
			return err
		}
		if err := f.check(); err != nil {
			return err
		}
		ctx, stop := signalContext()
		defer stop()
		return runController(ctx, f, log)
	})
}

// newControllerFlags declares the flags of `bridgehead controller` on fs.
func newControllerFlags(fs *flag.FlagSet) *controllerFlags {
	f := &controllerFlags{}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig `FILE` (empty: the in-cluster service account)")
	fs.StringVar(&f.namespace, "namespace", "bridgehead-system", "`NAMESPACE` of the leader Lease and the catalog ConfigMaps (Events about Nodes and Sites go to \"default\", the only namespace the API accepts for them)")
	fs.StringVar(&f.metricsListen, "metrics-listen", ":9643", "`ADDR` serving /metrics, /healthz and /readyz (empty: none)")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "compete for the Lease; run one replica only with false")
	// Leader election: the lease and renew deadline of
	// kube-controller-manager and kube-scheduler (and controller-runtime),
	// which operators already know, with a 0.5 s retry instead of 2 s. A
	// leader stopped by SIGTERM releases the Lease once its workers have
	// stopped, and the standby takes it at its next try (0.5 to 1.1 s);
	// after a crash the standby waits the lease duration from the last
	// renewal it saw, and its tries add up to twice 2.2 retry periods (up
	// to 2.2 s; controller/doc.go). The retry costs the leader two Lease
	// updates a second.
	fs.DurationVar(&f.leaseDuration, "lease-duration", 15*time.Second, "after a leader's crash, how long a standby waits from the last renewal it saw before taking over (`DURATION`, whole seconds)")
	fs.DurationVar(&f.renewDeadline, "renew-deadline", 10*time.Second, "the leader stops leading when it cannot renew for this `DURATION`; keep --renew-deadline + --retry-period at least 1 s below --lease-duration")
	fs.DurationVar(&f.retryPeriod, "retry-period", 500*time.Millisecond, "interval of lease renewals and of a standby's tries (`DURATION`; client-go jitters the tries up to 2.2 times it)")
	fs.DurationVar(&f.releaseGrace, "release-grace", 5*time.Minute, "a deleted node's pod blocks return to the pool after this `DURATION`")
	fs.DurationVar(&f.catalogInterval, "catalog-interval", time.Second, "least time between two catalog publications that write, and between two writes of the release graces, so no catalog or release ConfigMap is written more often (`DURATION`)")
	fs.DurationVar(&f.auditInterval, "audit-interval", controller.DefaultAuditInterval, "the leader audits every Node's pod blocks for a block held twice at the start of its lead and every `DURATION` (reads the cache only)")
	fs.StringVar(&f.identity, "identity", "", "this replica's `NAME` in the Lease (default: hostname and a random suffix)")
	fs.IntVar(&f.workers, "workers", 4, "node reconcile `WORKERS`")
	fs.Float64Var(&f.qps, "kube-api-qps", 50, "client-side limit of API requests per second (`QPS`)")
	fs.IntVar(&f.burst, "kube-api-burst", 100, "client-side burst of API requests (`N`)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `FORMAT`: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	f.azure.declare(fs)
	return f
}

// check refuses flag values that cannot work together.
func (f *controllerFlags) check() error {
	if f.auditInterval <= 0 {
		return usageError{fmt.Errorf("--audit-interval %s: want a positive duration", f.auditInterval)}
	}
	if err := f.azure.check(); err != nil {
		return err
	}
	if f.leaderElect && !(f.retryPeriod < f.renewDeadline && f.renewDeadline < f.leaseDuration) {
		return usageError{fmt.Errorf("want --retry-period < --renew-deadline < --lease-duration, got %s, %s, %s", f.retryPeriod, f.renewDeadline, f.leaseDuration)}
	}
	if f.leaderElect && f.renewDeadline+f.retryPeriod+time.Second > f.leaseDuration {
		// A leader that cannot renew leads on for up to RetryPeriod +
		// RenewDeadline after its last renewal; a standby may take over
		// LeaseDuration after it (controller.drainTimeout).
		return usageError{fmt.Errorf("want --renew-deadline + --retry-period + 1s <= --lease-duration (a leader that cannot renew leads on that long after its last renewal), got %s + %s + 1s > %s", f.renewDeadline, f.retryPeriod, f.leaseDuration)}
	}
	if f.leaderElect && f.leaseDuration%time.Second != 0 {
		// The Lease records whole seconds: 4.5s would be 4s to the standby.
		return usageError{fmt.Errorf("--lease-duration %s: want whole seconds (the Lease records seconds)", f.leaseDuration)}
	}
	return nil
}

// options are the controller's Options the flags set (the clients,
// logger and registry come on top).
func (f *controllerFlags) options() controller.Options {
	return controller.Options{
		Namespace: f.namespace, Identity: f.identity, LeaderElect: f.leaderElect,
		LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod,
		ReleaseGrace: f.releaseGrace, Workers: f.workers, CatalogInterval: f.catalogInterval,
		AuditInterval: f.auditInterval, AzureRouteInterval: f.azure.interval,
	}
}

func runController(ctx context.Context, f *controllerFlags, log *slog.Logger) error {
	cfg, err := kubeConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(f.qps), f.burst
	cfg.UserAgent = "bridgehead-controller/" + buildVersion()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if f.identity == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		f.identity = host + "_" + hex.EncodeToString(b[:])
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o := f.options()
	o.Client, o.Dynamic, o.Logger, o.Registry = client, dyn, log, reg
	if o.AzureRoutes, err = f.azure.syncer(log, reg); err != nil {
		return err
	}
	c, err := controller.New(o)
	if err != nil {
		return err
	}
	if f.metricsListen != "" {
		ln, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		srv := &http.Server{Handler: healthMux(reg, c), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		log.Info("serving metrics", "addr", ln.Addr().String())
	}
	return c.Run(ctx)
}

// healthMux serves /metrics, /healthz (the process answers) and /readyz
// (the caches have synced; a standby is ready too).
func healthMux(reg *prometheus.Registry, c *controller.Controller) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !c.Ready() {
			http.Error(w, "caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// kubeConfig loads a kubeconfig file, or the in-cluster config when path
// is empty.
func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, errors.New("not in a cluster: pass --kubeconfig FILE")
		}
		return cfg, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}
