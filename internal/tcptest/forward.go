package tcptest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Forward accepts on ln until the test ends and joins each connection to a
// new one to upstream, both ways, as a TCP proxy would. A connection that
// upstream refuses is closed, as upstream's own refusal would close it.
// When the test ends Forward closes ln and every connection still joined
// (an API server's watches stay open until then) and waits for its
// goroutines.
func Forward(t testing.TB, ln net.Listener, upstream string) {
	t.Helper()
	var mu sync.Mutex
	live := map[net.Conn]struct{}{} // connections open now; written under mu by the handlers
	closed := false                 // the test has ended; set under mu by the cleanup
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return false
		}
		live[c] = struct{}{}
		return true
	}
	untrack := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		delete(live, c)
	}
	// Serve's cleanup waits for the handlers, so the connections are
	// closed by a cleanup registered after it, which runs before it.
	Serve(t, ln, func(in net.Conn) {
		defer in.Close()
		out, err := net.DialTimeout("tcp", upstream, 2*time.Second)
		if err != nil {
			return
		}
		defer out.Close()
		if !track(in) || !track(out) {
			return
		}
		defer untrack(in)
		defer untrack(out)
		done := make(chan struct{})
		go func() {
			defer close(done)
			io.Copy(out, in)
			if tc, ok := out.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
		}()
		io.Copy(in, out)
		in.Close()
		<-done
	})
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for c := range live {
			c.Close()
		}
	})
}
