package control

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/router"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// sampleStatus has every field set, so a round trip that loses one fails.
func sampleStatus() Status {
	return Status{
		Version: "v1.2.3", Site: "a", Gateway: "gw-a1",
		ConfigPath: "/etc/bridgehead/bridgehead.yaml", ConfigHash: "3f2a9c01",
		ConfigLoaded: t0.Add(-5 * time.Minute), Started: t0.Add(-2*time.Hour - 3*time.Minute),
		Ready: true, AllSites: false,
		Sites: []health.SiteReport{
			{Site: "b", Ready: true, Gateways: []health.GatewayReport{
				{Gateway: "gw-b1", State: health.StateUp, LastReceive: t0.Add(-3 * time.Second)},
				{Gateway: "gw-b2", State: health.StateDown, LastReceive: t0.Add(-26 * time.Hour)},
			}},
			{Site: "c", Ready: false, Reason: "no packet ever received from any gateway", Gateways: []health.GatewayReport{
				{Gateway: "gw-c1", State: health.StateConnecting},
			}},
			{Site: "d", Ready: false, Reason: "no gateways configured", Gateways: []health.GatewayReport{}},
		},
		Peers: []health.PeerState{
			{Site: "b", Gateway: "gw-b1", Endpoint: netip.MustParseAddrPort("203.0.113.7:51820"), Path: health.PathDirect,
				LastHandshake: t0.Add(-12 * time.Second), LastReceive: t0.Add(-3 * time.Second),
				TxBytes: 3_500_000, RxBytes: 1_234_567_890, TxPackets: 4000, RxPackets: 900_000,
				SessionCreated: t0.Add(-12 * time.Second),
				Live: router.LivenessStats{State: router.LiveUp, ProbeInterval: 200 * time.Millisecond, ProbeRTT: 412 * time.Microsecond,
					ProbesSent: 40, ProbeReplies: 39, LastChange: t0.Add(-11 * time.Second), Downs: 1}},
			{Site: "b", Gateway: "gw-b2", Endpoint: netip.MustParseAddrPort("[2001:db8::2]:51820"), Path: health.PathDirect,
				LastHandshake: t0.Add(-26 * time.Hour), LastReceive: t0.Add(-26 * time.Hour),
				TxBytes: 512, RxBytes: 1536, TxPackets: 2, RxPackets: 3, Down: true,
				Live: router.LivenessStats{State: router.LiveDown, LastChange: t0.Add(-26 * time.Hour), Downs: 3}},
			{Site: "c", Gateway: "gw-c1", Endpoint: netip.MustParseAddrPort("198.51.100.9:51821"), QueuedPackets: 7, Path: health.PathDirect},
		},
		Drops: []Drop{
			{Direction: "inside", Reason: "no_route", Count: 12},
			{Direction: "outside", Reason: "bad_tag", Count: 3456},
		},
	}
}

// listen starts a server on a socket in a fresh temp dir.
func listen(t *testing.T, src Source) (*Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run", "bh.sock")
	s, err := Listen(path, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestRoundTrip(t *testing.T) {
	want := sampleStatus()
	var calls atomic.Int32
	s, path := listen(t, func() Status { calls.Add(1); return want })
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	got, err := Fetch(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", *got, want)
	}
	if calls.Load() != 1 {
		t.Errorf("source called %d times, want 1", calls.Load())
	}

	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want socket 0600", fi.Mode())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o755 {
		t.Errorf("created directory mode = %v, want 0755", di.Mode().Perm())
	}
	// Nothing but the socket is left in the directory (the private bind
	// directory is gone).
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "bh.sock" {
		t.Errorf("directory holds %v, want only bh.sock", ents)
	}
}

func TestJSONNames(t *testing.T) {
	b, err := json.Marshal(sampleStatus())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"version":`, `"configHash":`, `"configLoaded":`, `"ready":`, `"sites":`, `"peers":`,
		`"drops":`, `"endpoint":"203.0.113.7:51820"`, `"lastHandshake":`, `"rxBytes":`, `"queuedPackets":`, `"state":"up"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
	// Zero times are left out rather than shown as year 1.
	if strings.Contains(string(b), "0001-01-01") {
		t.Errorf("JSON has a zero time: %s", b)
	}
}

func TestConcurrentFetch(t *testing.T) {
	var calls atomic.Int32
	_, path := listen(t, func() Status {
		n := calls.Add(1)
		return Status{Version: "v", Drops: []Drop{{Count: uint64(n)}}}
	})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			st, err := Fetch(context.Background(), path)
			if err == nil && st.Version != "v" {
				err = errors.New("wrong status " + st.Version)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if calls.Load() != 8 {
		t.Errorf("source called %d times, want 8", calls.Load())
	}
}

// staleSocket leaves a socket file at path that nothing listens on.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
}

func TestListenExistingPath(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string)
		wantErr string // "" = Listen succeeds
		// survives: the file must still be there with its contents.
		survives bool
	}{
		{name: "nothing there", prepare: func(*testing.T, string) {}},
		{name: "stale socket is replaced", prepare: staleSocket},
		{
			name: "regular file is kept",
			prepare: func(t *testing.T, path string) {
				if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "is a regular file, not a socket", survives: true,
		},
		{
			name: "directory is kept",
			prepare: func(t *testing.T, path string) {
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "is a directory, not a socket",
		},
		{
			name: "symlink to a socket is kept",
			prepare: func(t *testing.T, path string) {
				staleSocket(t, path+".real")
				if err := os.Symlink(path+".real", path); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "is a symlink, not a socket",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bh.sock")
			tt.prepare(t, path)
			s, err := Listen(path, func() Status { return Status{Site: "x"} }, nil)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Listen: %v", err)
				}
				defer s.Close()
				st, err := Fetch(context.Background(), path)
				if err != nil || st.Site != "x" {
					t.Fatalf("Fetch = %+v, %v", st, err)
				}
				return
			}
			if err == nil {
				s.Close()
				t.Fatalf("Listen succeeded, want error %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Listen error = %q, want it to contain %q", err, tt.wantErr)
			}
			if _, err := os.Lstat(path); err != nil {
				t.Errorf("%s was removed: %v", path, err)
			}
			if tt.survives {
				if b, _ := os.ReadFile(path); string(b) != "precious" {
					t.Errorf("file content = %q, want it untouched", b)
				}
			}
		})
	}
}

func TestListenLiveSocket(t *testing.T) {
	first, path := listen(t, func() Status { return Status{Site: "first"} })
	_, err := Listen(path, func() Status { return Status{Site: "second"} }, nil)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Listen error = %v, want 'in use'", err)
	}
	st, err := Fetch(context.Background(), first.Path())
	if err != nil || st.Site != "first" {
		t.Fatalf("first server after second Listen: %+v, %v", st, err)
	}
}

func TestListenBadArgs(t *testing.T) {
	if _, err := Listen("", func() Status { return Status{} }, nil); err == nil {
		t.Error("empty path: no error")
	}
	if _, err := Listen(filepath.Join(t.TempDir(), "s"), nil, nil); err == nil {
		t.Error("nil source: no error")
	}
}

func TestClose(t *testing.T) {
	s, path := listen(t, func() Status { return Status{} })
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after Close: %v, want it gone", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := Fetch(context.Background(), path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Fetch after Close = %v, want ErrNotExist", err)
	}
}

func TestFetchErrors(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	staleSocket(t, stale)
	serve := func(h http.HandlerFunc) string {
		path := filepath.Join(dir, "srv.sock")
		os.Remove(path)
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		done := make(chan struct{})
		go func() { defer close(done); srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close(); <-done })
		return path
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		path    func() string
		ctx     context.Context
		is      error
		wantErr string
	}{
		{name: "no socket", path: func() string { return filepath.Join(dir, "missing.sock") }, is: fs.ErrNotExist},
		{name: "stale socket", path: func() string { return stale }, is: syscall.ECONNREFUSED},
		{
			name: "server error",
			path: func() string {
				return serve(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", 500) })
			},
			wantErr: "500 Internal Server Error: boom",
		},
		{
			name: "not JSON",
			path: func() string {
				return serve(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("<html>")) })
			},
			wantErr: "decoding status",
		},
		{name: "cancelled", path: func() string { return stale }, ctx: cancelled, is: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			path := tt.path()
			st, err := Fetch(ctx, path)
			if err == nil {
				t.Fatalf("Fetch = %+v, want error", st)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("Fetch error = %v, want errors.Is %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
				t.Errorf("Fetch error = %q, want it to name %s and contain %q", err, path, tt.wantErr)
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	_, path := listen(t, func() Status { return Status{} })
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}}
	resp, err := c.Get("http://bridgehead/status")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	for _, key := range []string{`"sites":[]`, `"peers":[]`, `"drops":[]`} {
		if !strings.Contains(string(body), key) {
			t.Errorf("status of an empty Source lacks %s: %s", key, body)
		}
	}

	tests := []struct {
		method, url string
		want        int
	}{
		{"GET", "/status", http.StatusOK},
		{"HEAD", "/status", http.StatusOK},
		{"POST", "/status", http.StatusMethodNotAllowed},
		{"GET", "/", http.StatusNotFound},
		{"GET", "/metrics", http.StatusNotFound},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, "http://bridgehead"+tt.url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.url, resp.StatusCode, tt.want)
		}
	}
}

func TestDrops(t *testing.T) {
	var d router.Drops
	if got := Drops(&d); got == nil || len(got) != 0 {
		t.Errorf("Drops of zero counters = %#v, want empty non-nil", got)
	}
	d.Add(router.Outside, router.ReasonBadTag, 3)
	d.Add(router.Inside, router.ReasonTooBig, 2)
	d.Add(router.Inside, router.ReasonNoRoute, 1)
	want := []Drop{
		{Direction: "inside", Reason: "no_route", Count: 1},
		{Direction: "inside", Reason: "too_big", Count: 2},
		{Direction: "outside", Reason: "bad_tag", Count: 3},
	}
	if got := Drops(&d); !reflect.DeepEqual(got, want) {
		t.Errorf("Drops = %+v, want %+v", got, want)
	}
}
