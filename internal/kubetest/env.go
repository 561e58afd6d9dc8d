package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Binary names in the testenv directory (hack/kube-testenv/build.sh).
const (
	etcdBin      = "etcd"
	apiserverBin = "kube-apiserver"
	// readyTimeout bounds each process's start; the API server is
	// usually ready in about 2 s, more on a loaded 2-core machine.
	readyTimeout = 60 * time.Second
	// ServiceCIDR is the API server's --service-cluster-ip-range.
	ServiceCIDR = "10.96.0.0/24"
)

// Dir is the directory holding etcd and kube-apiserver: $KUBE_TESTENV_DIR,
// or $HOME/.cache/bridgehead/kube-testenv.
func Dir() string {
	if d := os.Getenv("KUBE_TESTENV_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "bridgehead", "kube-testenv")
	}
	return filepath.Join(home, ".cache", "bridgehead", "kube-testenv")
}

// Available reports why the binaries cannot be used, or nil.
func Available(dir string) error {
	for _, b := range []string{etcdBin, apiserverBin} {
		p := filepath.Join(dir, b)
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("kubetest: %s missing (run `make kube-testenv`): %w", b, err)
		}
		if st.Mode()&0o111 == 0 {
			return fmt.Errorf("kubetest: %s is not executable", p)
		}
	}
	return nil
}

// Options configure New.
type Options struct {
	// BinDir holds etcd and kube-apiserver (default Dir()).
	BinDir string
	// WorkDir holds data, certificates, kubeconfig and logs; New creates
	// a temporary directory when empty and Stop removes only that one.
	WorkDir string
	// Logf receives start and stop lines (default: discarded).
	Logf func(format string, args ...any)
}

// Env is a running etcd and kube-apiserver.
type Env struct {
	// Config is the admin identity's client config (group
	// system:masters). Copy it (rest.CopyConfig) before changing it.
	Config *rest.Config
	// Kubeconfig is a file holding the same identity, for kubectl.
	Kubeconfig string
	// WorkDir holds data, certificates and the logs etcd.log and
	// kube-apiserver.log.
	WorkDir string
	// EtcdReady and APIServerReady are how long each took from exec to
	// ready at the last start.
	EtcdReady, APIServerReady time.Duration

	binDir  string
	ownDir  bool
	logf    func(string, ...any)
	pki     *pki
	etcdURL string
	apiPort int
	etcd    *process
	apiproc *process
}

// Start starts an Env for t and stops it when t ends. It skips t when the
// binaries are missing, and fails it instead when $CI is set.
func Start(t testing.TB) *Env {
	t.Helper()
	dir := Dir()
	if err := Available(dir); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v (CI must build them first)", err)
		}
		t.Skipf("%v", err)
	}
	e, err := New(Options{BinDir: dir, WorkDir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.dumpLogs(t.Logf)
		}
		if err := e.Stop(); err != nil {
			t.Errorf("kubetest: stop: %v", err)
		}
	})
	return e
}

// New starts etcd, then the API server, and returns when the API server's
// /readyz answers ok. On error nothing is left running.
func New(o Options) (_ *Env, err error) {
	if o.BinDir == "" {
		o.BinDir = Dir()
	}
	if err := Available(o.BinDir); err != nil {
		return nil, err
	}
	e := &Env{binDir: o.BinDir, WorkDir: o.WorkDir, logf: o.Logf}
	if e.logf == nil {
		e.logf = func(string, ...any) {}
	}
	if e.WorkDir == "" {
		if e.WorkDir, err = os.MkdirTemp("", "bhk-kubetest-"); err != nil {
			return nil, err
		}
		e.ownDir = true
	}
	defer func() {
		if err != nil {
			e.dumpLogs(e.logf)
			_ = e.Stop()
		}
	}()
	if e.pki, err = newPKI(e.WorkDir); err != nil {
		return nil, err
	}
	if err := e.startEtcd(); err != nil {
		return nil, err
	}
	if e.apiPort, err = freePort(); err != nil {
		return nil, err
	}
	e.Config = &rest.Config{
		Host: "https://127.0.0.1:" + strconv.Itoa(e.apiPort),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   e.pki.caPEM,
			CertData: e.pki.adminCertPEM,
			KeyData:  e.pki.adminKeyPEM,
		},
		QPS:   1000,
		Burst: 2000,
	}
	if err := e.writeKubeconfig(); err != nil {
		return nil, err
	}
	if err := e.StartAPIServer(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Env) startEtcd() error {
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	e.etcdURL = "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	start := time.Now()
	e.etcd, err = startProcess(filepath.Join(e.binDir, etcdBin), filepath.Join(e.WorkDir, "etcd.log"),
		"--name=kubetest",
		"--data-dir="+filepath.Join(e.WorkDir, "etcd"),
		"--listen-client-urls="+e.etcdURL,
		"--advertise-client-urls="+e.etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	if err := e.waitHTTP(e.etcd, e.etcdURL+"/health", nil); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	e.EtcdReady = time.Since(start)
	e.logf("kubetest: etcd (pid %d) ready in %v at %s", e.etcd.cmd.Process.Pid, e.EtcdReady.Round(time.Millisecond), e.etcdURL)
	return nil
}

// StartAPIServer starts the API server on its port (after New, only
// after StopAPIServer) and waits for /readyz. Objects persist in etcd, so
// clients resume where they were.
func (e *Env) StartAPIServer() error {
	if e.apiproc != nil {
		return errors.New("kubetest: the API server is running")
	}
	p := e.pki
	start := time.Now()
	var err error
	e.apiproc, err = startProcess(filepath.Join(e.binDir, apiserverBin), filepath.Join(e.WorkDir, "kube-apiserver.log"),
		"--etcd-servers="+e.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(e.apiPort),
		"--tls-cert-file="+p.serverCert,
		"--tls-private-key-file="+p.serverKey,
		"--client-ca-file="+p.caFile,
		"--service-account-key-file="+p.saPub,
		"--service-account-signing-key-file="+p.saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--authorization-mode=RBAC",
		// On loopback the endpoint reconciler refuses 127.0.0.1 as the
		// kubernetes Service's endpoint and the server never gets ready.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--cert-dir="+filepath.Join(e.WorkDir, "apiserver-certs"),
		"--v=1",
	)
	if err != nil {
		return err
	}
	rt, err := rest.TransportFor(e.Config)
	if err != nil {
		return err
	}
	if err := e.waitHTTP(e.apiproc, e.Config.Host+"/readyz", rt); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	e.APIServerReady = time.Since(start)
	e.logf("kubetest: kube-apiserver (pid %d) ready in %v at %s", e.apiproc.cmd.Process.Pid, e.APIServerReady.Round(time.Millisecond), e.Config.Host)
	return nil
}

// StopAPIServer stops the API server and leaves etcd running; clients see
// connection refused until StartAPIServer.
func (e *Env) StopAPIServer() error {
	if e.apiproc == nil {
		return nil
	}
	start := time.Now()
	err := e.apiproc.stop()
	if err != nil {
		// Say why before the work directory goes: the API server's
		// last words on its shutdown.
		for _, l := range tail(e.apiproc.log.Name(), 30) {
			e.logf("kube-apiserver.log: %s", l)
		}
	}
	e.apiproc = nil
	e.logf("kubetest: kube-apiserver stopped in %v", time.Since(start).Round(time.Millisecond))
	return err
}

// Stop stops the API server and etcd and removes the work directory when
// New created it. It is safe to call twice.
func (e *Env) Stop() error {
	errs := []error{e.StopAPIServer()}
	if e.etcd != nil {
		errs = append(errs, e.etcd.stop())
		e.etcd = nil
	}
	if e.ownDir && e.WorkDir != "" {
		errs = append(errs, os.RemoveAll(e.WorkDir))
		e.ownDir = false
	}
	return errors.Join(errs...)
}

// Clientset is a typed client for the admin identity.
func (e *Env) Clientset(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatalf("kubetest: clientset: %v", err)
	}
	return cs
}

// Impersonate returns a copy of Config acting as user (for example
// "system:serviceaccount:NS:NAME") with groups; the admin identity may
// impersonate anyone, so requests are authorized as that user.
func (e *Env) Impersonate(user string, groups ...string) *rest.Config {
	c := rest.CopyConfig(e.Config)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return c
}

// ServiceAccount is the user name and groups of ServiceAccount ns/name,
// for Impersonate.
func ServiceAccount(ns, name string) (string, []string) {
	return "system:serviceaccount:" + ns + ":" + name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

func (e *Env) writeKubeconfig() error {
	c := clientcmdapi.NewConfig()
	c.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.pki.caPEM}
	c.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: e.pki.adminCertPEM, ClientKeyData: e.pki.adminKeyPEM}
	c.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "admin"}
	c.CurrentContext = "kubetest"
	e.Kubeconfig = filepath.Join(e.WorkDir, "kubeconfig")
	return clientcmd.WriteToFile(*c, e.Kubeconfig)
}

// waitHTTP polls url until it answers 200, the process exits, or
// readyTimeout passes.
func (e *Env) waitHTTP(p *process, url string, rt httpRoundTripper) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	return p.waitReady(ctx, url, rt)
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
