package relay

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// TLSFiles are the relay's TLS files and the client identities it
// accepts: LoadTLS's input.
type TLSFiles struct {
	CertFile, KeyFile, ClientCAFile string
	// ClientNames, when not empty, pins the clients: a certificate that
	// chains to ClientCAFile is accepted only if its subject common name,
	// one of its DNS names or one of its URIs is listed. Without it any
	// certificate the CA signed is accepted, which for a CA that also
	// signs other components' certificates (a cluster CA) admits them
	// all.
	ClientNames []string
}

// tlsCheckInterval is how often LoadTLS's config looks at its files
// (their size and modification time): a renewed certificate applies to
// clients that connect at most this long after it was written.
const tlsCheckInterval = time.Second

// LoadTLS reads f into a server config that requires and verifies client
// certificates (TLS 1.2 at least) and pins f.ClientNames. The config
// follows its files: a client that connects after one of them changed
// (a renewed certificate, a rotated CA) is served with them read anew;
// connections already open keep theirs. A change that does not load (a
// certificate written before its key, say) leaves the last good files in
// use and is reported to onError (nil: ignored) once per change; the
// files are read again once they change again. An error here means the
// files do not load now.
func LoadTLS(f TLSFiles, onError func(error)) (*tls.Config, error) {
	w := &tlsWatch{files: f, onError: onError, now: time.Now}
	cfg, stamps, err := w.load()
	if err != nil {
		return nil, err
	}
	w.cur, w.stamps, w.checked = cfg, stamps, w.now()
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ClientAuth:         tls.RequireAndVerifyClientCert,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return w.config(), nil },
	}, nil
}

// tlsWatch is LoadTLS's config source. mu guards the fields below it.
type tlsWatch struct {
	files   TLSFiles
	onError func(error)
	now     func() time.Time

	mu      sync.Mutex
	cur     *tls.Config
	stamps  [3]fileStamp // of the files cur was read from
	failed  [3]fileStamp // of the files that last failed to load
	checked time.Time
}

// fileStamp is what tells a changed file: size and modification time.
type fileStamp struct {
	size int64
	mod  time.Time
}

func (w *tlsWatch) paths() [3]string {
	return [3]string{w.files.CertFile, w.files.KeyFile, w.files.ClientCAFile}
}

func (w *tlsWatch) stat() ([3]fileStamp, error) {
	var out [3]fileStamp
	for i, p := range w.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{fi.Size(), fi.ModTime()}
	}
	return out, nil
}

// config returns the config to serve a new client with, reading the
// files again when they changed since the last look.
func (w *tlsWatch) config() *tls.Config {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if now.Sub(w.checked) < tlsCheckInterval {
		return w.cur
	}
	w.checked = now
	st, err := w.stat()
	if err != nil || st == w.stamps || st == w.failed {
		return w.cur
	}
	cfg, st, err := w.load()
	if err != nil {
		w.failed = st
		if w.onError != nil {
			w.onError(err)
		}
		return w.cur
	}
	w.cur, w.stamps = cfg, st
	return w.cur
}

// load reads the files into a config, with the stamps they had before
// they were read (a write during the read shows as a change next time).
func (w *tlsWatch) load() (*tls.Config, [3]fileStamp, error) {
	st, err := w.stat()
	if err != nil {
		return nil, st, err
	}
	f := w.files
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, st, fmt.Errorf("certFile %s, keyFile %s: %v", f.CertFile, f.KeyFile, err)
	}
	pemData, err := os.ReadFile(f.ClientCAFile)
	if err != nil {
		return nil, st, fmt.Errorf("clientCAFile: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, st, fmt.Errorf("clientCAFile %s holds no PEM certificate", f.ClientCAFile)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	if names := slices.Clone(f.ClientNames); len(names) > 0 {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return checkIdentity(cs, names) }
	}
	return cfg, st, nil
}

// identityError is a verified client certificate that names none of the
// allowed identities.
type identityError struct{ cn string }

func (e *identityError) Error() string {
	return fmt.Sprintf("client certificate %q names none of the allowed client identities", e.cn)
}

// checkIdentity accepts a connection whose verified leaf certificate has
// a subject common name, DNS name or URI among names.
func checkIdentity(cs tls.ConnectionState, names []string) error {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return errors.New("no verified client certificate")
	}
	leaf := cs.VerifiedChains[0][0]
	if slices.Contains(names, leaf.Subject.CommonName) && leaf.Subject.CommonName != "" {
		return nil
	}
	for _, n := range leaf.DNSNames {
		if slices.Contains(names, n) {
			return nil
		}
	}
	for _, u := range leaf.URIs {
		if slices.Contains(names, u.String()) {
			return nil
		}
	}
	return &identityError{cn: leaf.Subject.CommonName}
}
