// Package control is the gateway's local control socket: HTTP over a unix
// socket that `bridgehead status` reads. Only root can connect (the socket
// is mode 0600); it is not a network API.
//
// The server owns its listener and socket file from Listen until Close.
// It keeps no state of its own: every request calls the Source the daemon
// passed in, which must be safe to call from any goroutine.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/relay"
	"github.com/bridgehead/bridgehead/router"
)

// DefaultSocket is where the daemon listens unless the config says
// otherwise; systemd creates its directory (RuntimeDirectory=bridgehead).
const DefaultSocket = "/run/bridgehead/bridgehead.sock"

// maxResponse bounds what Fetch reads from the socket.
const maxResponse = 16 << 20

// Status is what GET /status returns: the running gateway, its readiness
// and a snapshot of its peers and drop counters.
type Status struct {
	Version      string    `json:"version"`
	Site         string    `json:"site"`
	Gateway      string    `json:"gateway"`
	ConfigPath   string    `json:"configPath"`
	ConfigHash   string    `json:"configHash"`
	ConfigLoaded time.Time `json:"configLoaded,omitzero"`
	Started      time.Time `json:"started,omitzero"`
	// Ready: this gateway reaches at least one remote site (/readyz).
	Ready bool `json:"ready"`
	// AllSites: it reaches every remote site (`status` exits 1 without).
	AllSites bool                `json:"allSites"`
	Sites    []health.SiteReport `json:"sites"`
	// LAN says why the gateway cannot deliver to its own site; Ready is
	// then false and remote gateways move its flows. Empty while it can.
	LAN   string             `json:"lan,omitempty"`
	Peers []health.PeerState `json:"peers"`
	// Drops lists the nonzero drop counters.
	Drops []Drop `json:"drops"`
	// Relay is the CONNECT relay's summary; absent when it is off.
	Relay *relay.Status `json:"relay,omitempty"`
}

// Drop is one nonzero drop counter (bridgehead_dropped_packets_total).
type Drop struct {
	Direction string `json:"direction"`
	Reason    string `json:"reason"`
	Count     uint64 `json:"count"`
}

// Drops returns the nonzero counters of d, inside direction first, each
// in the order of router.Reasons. It never returns nil.
func Drops(d *router.Drops) []Drop {
	out := []Drop{}
	for _, dir := range []router.Direction{router.Inside, router.Outside} {
		for _, r := range router.Reasons() {
			if n := d.Get(dir, r); n > 0 {
				out = append(out, Drop{Direction: dir.String(), Reason: r.String(), Count: n})
			}
		}
	}
	return out
}

// Source returns the current status. The server calls it once per
// request, possibly from several goroutines at once.
type Source func() Status

// Server serves the control socket. Create it with Listen; Close stops it.
type Server struct {
	path string
	ln   *net.UnixListener
	srv  *http.Server
	log  *slog.Logger
	done chan struct{} // closed when Serve has returned

	closeOnce sync.Once
	closeErr  error
}

// Listen creates the control socket at path and serves GET /status on it
// until Close. It creates the parent directory (0755) if missing and
// replaces a stale socket left by a previous run, but refuses to remove
// anything that is not a socket, or a socket a live process still serves.
// The socket is mode 0600 from the moment it appears at path: it is bound
// in a private directory and renamed into place.
func Listen(path string, src Source, log *slog.Logger) (*Server, error) {
	if path == "" {
		return nil, errors.New("control socket: empty path")
	}
	if src == nil {
		return nil, errors.New("control socket: nil Source")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	ln, err := listenPrivate(path)
	if err != nil {
		return nil, err
	}
	s := &Server{path: path, ln: ln, log: log, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		st := src()
		// Scripts get arrays, never null.
		st.Sites = nonNil(st.Sites)
		st.Peers = nonNil(st.Peers)
		st.Drops = nonNil(st.Drops)
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(&st); err != nil {
			log.Debug("control socket: writing status", "err", err)
		}
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("control socket stopped", "path", path, "err", err)
		}
	}()
	log.Info("control socket listening", "path", path)
	return s, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops serving, waits for the server goroutine to return and
// removes the socket file. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		err := s.srv.Close()
		<-s.done
		if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("control socket: %w", rerr))
		}
		s.closeErr = err
	})
	return s.closeErr
}

// removeStale removes path if it is a socket nobody serves.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("control socket: %s exists and is a %s, not a socket; not removing it", path, kind(fi.Mode()))
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("control socket: %s is in use: is another bridgehead running?", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("control socket: probing %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("control socket: removing stale %s: %w", path, err)
	}
	return nil
}

// listenPrivate binds a unix socket in a fresh 0700 directory next to
// path, makes it 0600 and renames it to path, so the socket is never
// reachable with looser permissions. Path length limits apply to the
// temporary name, which is at most 16 bytes longer than path's directory.
func listenPrivate(path string) (*net.UnixListener, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".bh-")
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	// The listener must not unlink its bind name on Close: after the
	// rename that name is gone. Server.Close removes path instead.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(bound, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Rename(bound, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

// Fetch reads the status from the socket at path. When nothing serves
// there the error wraps fs.ErrNotExist (no socket) or
// syscall.ECONNREFUSED (a socket nobody listens on).
func Fetch(ctx context.Context, path string) (*Status, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://bridgehead/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return nil, fmt.Errorf("%s: %w", path, op.Err)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, maxResponse)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(body, 512))
		return nil, fmt.Errorf("%s: GET /status: %s: %s", path, resp.Status, msg)
	}
	var st Status
	if err := json.NewDecoder(body).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s: decoding status: %w", path, err)
	}
	return &st, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// kind names a file type for error messages.
func kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "special file"
}
