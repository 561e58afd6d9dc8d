package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"
)

// kubelet serves what kube-apiserver's callbacks look like to a node, on
// HTTPS like the real kubelet port (10250):
//
//	GET /healthz                    "ok"
//	GET /logs?seed=S&chunk=N&interval=D&duration=D
//	                                a chunked stream (like `kubectl logs -f`):
//	                                chunks of pseudo-random bytes from seed S,
//	                                flushed every interval, ended cleanly
//	                                after duration
//	GET /logs?seed=S&chunk=N&bytes=B
//	                                B such bytes at full speed, then the end
//	GET /exec with "Upgrade: bh-echo"
//	                                101 Switching Protocols (like SPDY and
//	                                WebSocket exec), then every byte echoed
//	                                back until the client half-closes; then
//	                                the server half-closes too
//
// It runs until killed or -timeout.
func kubelet(args []string) error {
	fs := flag.NewFlagSet("kubelet", flag.ExitOnError)
	listen := fs.String("listen", "", "address:port (the node address, port 10250)")
	certFile := fs.String("cert", "", "serving certificate (PEM); none: a self-signed one")
	keyFile := fs.String("key", "", "serving key (PEM)")
	timeout := fs.Duration("timeout", 10*time.Minute, "exit after this long")
	fs.Parse(args)
	var cert tls.Certificate
	var err error
	if *certFile == "" {
		cert, err = selfSigned()
	} else {
		cert, err = tls.LoadX509KeyPair(*certFile, *keyFile)
	}
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /logs", serveLogs)
	mux.HandleFunc("GET /exec", serveExec)
	srv := &http.Server{
		Handler:   mux,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		// Generous: 200 TLS handshakes through race-built gateways in
		// the end-to-end tests take tens of seconds.
		ReadHeaderTimeout: time.Minute,
	}
	fmt.Println("listening", ln.Addr())
	time.AfterFunc(*timeout, func() { srv.Close() })
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// streamRNG is the pseudo-random content of stream seed: both ends make
// the same bytes, so every byte can be checked without storing it.
func streamRNG(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	s[31] = 0xb7
	return rand.NewChaCha8(s)
}

func serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	seed, _ := strconv.ParseUint(q.Get("seed"), 10, 64)
	chunk, err := strconv.Atoi(q.Get("chunk"))
	if err != nil || chunk <= 0 || chunk > 1<<20 {
		chunk = 4096
	}
	interval, err := time.ParseDuration(q.Get("interval"))
	if err != nil {
		interval = 50 * time.Millisecond
	}
	duration, err := time.ParseDuration(q.Get("duration"))
	if err != nil {
		duration = 10 * time.Second
	}
	total, _ := strconv.ParseInt(q.Get("bytes"), 10, 64)
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "no flusher", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	rng := streamRNG(seed)
	buf := make([]byte, chunk)
	if total > 0 {
		for sent := int64(0); sent < total; {
			n := int(min(int64(chunk), total-sent))
			rng.Read(buf[:n])
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
			sent += int64(n)
		}
		return
	}
	end := time.Now().Add(duration)
	t := time.NewTicker(interval)
	defer t.Stop()
	for time.Now().Before(end) {
		rng.Read(buf)
		if _, err := w.Write(buf); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
}

func serveExec(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "bh-echo" {
		http.Error(w, "want Upgrade: bh-echo", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: bh-echo\r\n\r\n")
	// Echo until the client's close_notify (or FIN), then half-close.
	// brw.Reader holds what the client sent after its request, then
	// reads on from conn.
	if _, err := io.Copy(conn, brw.Reader); err != nil {
		return
	}
	halfClose(conn)
	// Wait for the client to finish (its FIN), so the close is clean.
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	io.Copy(io.Discard, rawConn(conn))
}

// halfClose shuts the writing side of c: close_notify for TLS, then the
// TCP FIN underneath.
func halfClose(c net.Conn) error {
	var err error
	if tc, ok := c.(*tls.Conn); ok {
		err = tc.CloseWrite()
	}
	if cw, ok := rawConn(c).(interface{ CloseWrite() error }); ok {
		err = errors.Join(err, cw.CloseWrite())
	}
	return err
}

// rawConn is the TCP connection under c.
func rawConn(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}

// selfSigned makes a throwaway serving certificate, as a kubelet without
// configured certificates does.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bhprobe-kubelet"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
