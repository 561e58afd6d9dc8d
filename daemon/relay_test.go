package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/config"
)

// freeAddr is a loopback TCP address nothing listens on (now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// connectStatus sends one CONNECT to the relay at addr; 0 when nothing
// listens there.
func connectStatus(t *testing.T, addr, dst string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", dst)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT via %s: %v", addr, err)
	}
	return resp.StatusCode
}

// TestReloadRelay: reloads turn the relay on, move it to another address
// (the old one stops answering, the counters carry on) and turn it off.
func TestReloadRelay(t *testing.T) {
	l := newLabAB(t)
	path, plain := l.path, mustRead(t, l.path)
	g, _ := l.startA(t)
	t.Cleanup(func() {
		if rl := g.relay.Load(); rl != nil {
			rl.Close()
		}
	})
	setRelay := func(listen string) {
		text := string(plain)
		if listen != "" {
			text = strings.Replace(text, "sites:\n", "relay:\n  listen: "+listen+"\nsites:\n", 1)
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		if err := g.reload(path, "test"); err != nil {
			t.Fatalf("reload with relay %q: %v", listen, err)
		}
	}
	refusedLocal := func() float64 {
		mfs, err := g.m.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "bridgehead_relay_refused_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" && l.GetValue() == "local_site" {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return -1
	}

	addr1 := freeAddr(t)
	setRelay(addr1)
	if st := g.status(); st.Relay == nil || st.Relay.Listen != addr1 {
		t.Fatalf("relay after turning it on: %+v", st.Relay)
	}
	if got := connectStatus(t, addr1, "10.1.0.9:10250"); got != 403 {
		t.Errorf("CONNECT to the local site: %d, want 403", got)
	}

	addr2 := freeAddr(t)
	setRelay(addr2)
	if st := g.status(); st.Relay == nil || st.Relay.Listen != addr2 {
		t.Fatalf("relay after moving it: %+v", st.Relay)
	}
	if got := connectStatus(t, addr1, "10.1.0.9:10250"); got != 0 {
		t.Errorf("the old address still answers: %d", got)
	}
	if got := connectStatus(t, addr2, "10.1.0.9:10250"); got != 403 {
		t.Errorf("CONNECT via the new address: %d, want 403", got)
	}
	if got := refusedLocal(); got != 2 {
		t.Errorf("refused{local_site} = %v across the move, want 2", got)
	}

	// A taken address refuses the reload and keeps the relay where it is.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	text := strings.Replace(string(plain), "sites:\n", "relay:\n  listen: "+taken.Addr().String()+"\nsites:\n", 1)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.reload(path, "test"); err == nil || !strings.Contains(err.Error(), "relay listen") {
		t.Errorf("reload onto a taken address: %v", err)
	}
	if got := connectStatus(t, addr2, "10.1.0.9:10250"); got != 403 {
		t.Errorf("after the refused reload, the relay at %s answers %d", addr2, got)
	}

	setRelay("")
	if st := g.status(); st.Relay != nil {
		t.Fatalf("relay still on: %+v", st.Relay)
	}
	if got := connectStatus(t, addr2, "10.1.0.9:10250"); got != 0 {
		t.Errorf("the relay still answers after it was turned off: %d", got)
	}
}

// TestRelayConfigLimits: the relay section's allowedClients and
// maxPendingPerSource reach the relay. A client outside allowedClients
// is closed without an answer and counted as client_not_allowed; one
// inside is answered.
func TestRelayConfigLimits(t *testing.T) {
	l := newLabAB(t)
	path, plain := l.path, mustRead(t, l.path)
	addr := freeAddr(t)
	text := strings.Replace(string(plain), "sites:\n", "relay:\n  listen: "+addr+
		"\n  maxPendingPerSource: 5\n  allowedClients: [127.0.0.2/32]\nsites:\n", 1)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := relayConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if rc.MaxPendingPerSource != 5 || len(rc.AllowedClients) != 1 {
		t.Errorf("relay config: maxPendingPerSource %d, allowedClients %v; want 5 and [127.0.0.2/32]", rc.MaxPendingPerSource, rc.AllowedClients)
	}
	reg := prometheus.NewRegistry()
	rl, err := startRelay(c, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()

	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	outside := dial("127.0.0.1")
	fmt.Fprintf(outside, "CONNECT 10.1.0.9:10250 HTTP/1.1\r\n\r\n")
	outside.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := outside.Read(make([]byte, 64)); err == nil || n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a client outside allowedClients read %d bytes (%v), want the connection closed", n, err)
	}
	inside := dial("127.0.0.2")
	fmt.Fprintf(inside, "CONNECT 10.1.0.9:10250 HTTP/1.1\r\n\r\n")
	inside.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(inside), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 403 {
		t.Errorf("a client inside allowedClients: %v, %v; want 403 (the local site)", resp, err)
	}
	if got := counterValue(t, reg, "bridgehead_relay_refused_total", "reason", "client_not_allowed"); got != 1 {
		t.Errorf("refused{client_not_allowed} = %v, want 1", got)
	}
}

// counterValue is the counter name{label="value"} in reg, -1 when absent.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
