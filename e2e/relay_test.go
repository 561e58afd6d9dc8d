package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/internal/syncbuf"
)

const relayAddr = gwA + ":8131"

// relayYAML is gateway A's relay section, with TLS (client certificates
// from the test CA) or without. headerTimeout is generous: on a loaded
// CI machine the race-built relay and client took over 5 s between
// accept and the CONNECT line.
func relayYAML(p pki, withTLS bool) string {
	s := "relay:\n  listen: " + relayAddr + "\n  allowedPorts: [10250]\n  maxConnections: 1024\n  maxConnectionsPerDestination: 256\n  headerTimeout: 30s\n"
	if withTLS {
		s += fmt.Sprintf("  tls:\n    certFile: %s\n    keyFile: %s\n    clientCAFile: %s\n", p.path("relay.pem"), p.path("relay.key"), p.path("ca.pem"))
	}
	return s
}

// curlConnect asks the relay (from node A) to CONNECT to target with curl
// and returns the status of the CONNECT response.
func (l *lab) curlConnect(target string) string {
	out, _ := l.exec("a-node", "curl", "-s", "-o", "/dev/null", "-w", "%{http_connect}", "--max-time", "10",
		"--proxy", "http://"+relayAddr, "--proxytunnel", "-k", "https://"+target+"/healthz")
	return strings.TrimSpace(out)
}

// startCallbacks runs `bhprobe callbacks ARGS` in node A in the
// background and waits until its streams are open.
func (l *lab) startCallbacks(args ...string) (*syncbuf.Buffer, chan error) {
	l.t.Helper()
	return l.startCallbacksRaw(append([]string{"callbacks"}, args...)...)
}

// startCallbacksRaw is startCallbacks with the bhprobe subcommand in args.
func (l *lab) startCallbacksRaw(args ...string) (*syncbuf.Buffer, chan error) {
	l.t.Helper()
	c := exec.Command("ip", append([]string{"netns", "exec", l.ns("a-node"), filepath.Join(l.bin, "bhprobe")}, args...)...)
	out := &syncbuf.Buffer{}
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		l.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "streams open") {
		if time.Now().After(deadline) {
			c.Process.Kill()
			l.t.Fatalf("streams did not open:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return out, done
}

// TestRelay runs API-server callbacks through gateway A's CONNECT relay
// to the kubelet on node B: curl and Go's http.Transport with a Proxy,
// 200 concurrent relayed 1 MiB echo streams, the refusals (local site,
// port, outside every site, pod address, host name: 403), then a reload
// that turns on mTLS while streams run (they survive; a certificate from
// another CA is refused), and a reload that removes site B, which closes
// the relayed connections to it.
func TestRelay(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("curl"); err != nil {
		if isCI() {
			t.Fatal("curl is not installed (make deps installs it)")
		}
		t.Skip("curl is not installed")
	}
	p := newPKI(t, t.TempDir())
	l := startLab(t, "CONFIG_EXTRA_A="+relayYAML(p, false))
	l.startKubelet(p)
	target := nodeB + ":" + kubeletPort
	base := []string{"-target", target, "-ca", p.path("ca.pem"), "-proxy", "http://" + relayAddr}

	t.Run("curl", func(t *testing.T) {
		l.t = t
		out := l.mustExec("a-node", "curl", "-sS", "--max-time", "10", "--proxy", "http://"+relayAddr, "--cacert", p.path("ca.pem"),
			"https://"+target+"/healthz")
		if strings.TrimSpace(out) != "ok" {
			t.Fatalf("curl through the relay: %q", out)
		}
	})

	t.Run("http.Transport Proxy and exec streams", func(t *testing.T) {
		l.t = t
		out := l.probe("a-node", append([]string{"callbacks", "-echo", "4", "-logs", "4", "-duration", "3s"}, base...)...)
		checkCallbacks(t, out, 8, 1)
	})

	// 1 MiB from the kubelet on each of 200 connections at once, through
	// Go's http.Transport with Proxy (one way: the race-built gateways
	// carry ~4 MB/s, and the echo streams above check the other way).
	t.Run("200 concurrent 1 MiB streams", func(t *testing.T) {
		l.t = t
		out := l.probe("a-node", append([]string{"callbacks", "-echo", "0", "-logs", "200", "-bytes", "1048576", "-chunk", "32768"}, base...)...)
		checkCallbacks(t, out, 200, 1<<20)
		m := l.metrics("a")
		if got := metric(m, `bridgehead_relay_bytes_total{direction="to_client"}`); got < 200<<20 {
			t.Errorf("relay counted %v bytes to clients, want at least %d", got, 200<<20)
		}
		// The client is done; the relay's teardown of each connection
		// (both half-closes seen, the access log line) may still run.
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := metric(l.metrics("a"), "bridgehead_relay_connections_active")
			if got == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%v relayed connections still open 10s after the client finished", got)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("403 outside the allow-list", func(t *testing.T) {
		l.t = t
		for _, tc := range []struct{ target, reason string }{
			{"10.224.0.5:10250", "local_site"},
			{nodeB + ":22", "port"},
			{"172.31.0.1:10250", "not_in_site"},
			{"10.245.1.10:10250", "pod_cidr"},
			{"kubelet.site-b.example:10250", "hostname"},
		} {
			series := fmt.Sprintf(`bridgehead_relay_refused_total{reason=%q}`, tc.reason)
			before := metric(l.metrics("a"), series)
			if got := l.curlConnect(tc.target); got != "403" {
				t.Errorf("CONNECT %s: %s, want 403", tc.target, got)
			}
			if got := metric(l.metrics("a"), series); got != before+1 {
				t.Errorf("%s = %v after CONNECT %s, want %v", series, got, tc.target, before+1)
			}
		}
		if got := l.curlConnect(target); got != "200" {
			t.Errorf("CONNECT %s: %s, want 200", target, got)
		}
	})

	t.Run("reload to mTLS", func(t *testing.T) {
		l.t = t
		// Plain-TCP streams opened before the reload keep running.
		out, done := l.startCallbacks(append([]string{"-echo", "3", "-logs", "3", "-duration", "6s"}, base...)...)
		cfg := l.readConfig("a")
		l.writeConfig("a", strings.Replace(cfg, relayYAML(p, false), relayYAML(p, true), 1))
		l.waitLog("a", "config reloaded", 1)
		if err := <-done; err != nil {
			t.Fatalf("streams across the reload: %v\n%s", err, out.String())
		}
		checkCallbacks(t, out.String(), 6, 1)

		tlsArgs := []string{"-target", target, "-ca", p.path("ca.pem"), "-proxy", "https://" + relayAddr}
		good := l.probe("a-node", append([]string{"callbacks", "-echo", "2", "-logs", "2", "-duration", "2s",
			"-cert", p.path("client.pem"), "-key", p.path("client.key")}, tlsArgs...)...)
		checkCallbacks(t, good, 4, 1)

		before := metric(l.metrics("a"), `bridgehead_relay_refused_total{reason="tls"}`)
		bad, err := l.exec("a-node", append([]string{filepath.Join(l.bin, "bhprobe"), "callbacks", "-echo", "1", "-logs", "0", "-duration", "1s",
			"-cert", p.path("rogue.pem"), "-key", p.path("rogue.key")}, tlsArgs...)...)
		if err == nil || !strings.Contains(bad, "1 failed") {
			t.Fatalf("a client certificate from another CA got through:\n%s", bad)
		}
		if got := metric(l.metrics("a"), `bridgehead_relay_refused_total{reason="tls"}`); got < before+1 {
			t.Errorf("refused{tls} = %v, want > %v", got, before)
		}
		// Plain CONNECT is not accepted any more.
		if got := l.curlConnect(target); got == "200" {
			t.Errorf("plain CONNECT accepted by the mTLS relay")
		}
	})

	t.Run("reload removing the site closes its connections", func(t *testing.T) {
		l.t = t
		tlsArgs := []string{"-target", target, "-ca", p.path("ca.pem"), "-proxy", "https://" + relayAddr,
			"-cert", p.path("client.pem"), "-key", p.path("client.key")}
		out, done := l.startCallbacks(append([]string{"-echo", "3", "-logs", "0", "-duration", "60s"}, tlsArgs...)...)
		cfg := l.readConfig("a")
		l.writeConfig("a", cfg[:strings.Index(cfg, "  - name: site-b")])
		l.waitLog("a", "config reloaded", 2)
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("streams to the removed site completed:\n%s", out.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("streams to the removed site still open 20s after the reload:\n%s", out.String())
		}
		if got := metric(l.metrics("a"), `bridgehead_relay_closed_total{reason="revoked"}`); got != 3 {
			t.Errorf("closed{revoked} = %v, want 3", got)
		}
		l.waitLog("a", "close=revoked", 3)
	})

	// Exit status 1 is expected: site B is gone, so not ready... or
	// ready with no remote site; only the relay line matters here.
	st, _ := l.exec("a-gw", filepath.Join(l.bin, "bridgehead"), "status", "--socket", filepath.Join(l.dir, "a.sock"))
	if !strings.Contains(st, "relay:   "+relayAddr+" (mTLS)") {
		t.Errorf("status does not show the relay:\n%s", st)
	}
	t.Logf("gateway A status:\n%s", st)
}

func isCI() bool { return os.Getenv("CI") != "" }
