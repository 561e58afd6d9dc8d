// Package tcptest runs TCP servers for tests: an accept loop that hands
// each connection to a handler, stopped and waited for when the test ends.
package tcptest

import (
	"net"
	"sync"
	"testing"
)

// Serve accepts on ln until ln closes and runs handle for each connection
// in a goroutine of its own; handle owns the connection. When the test
// ends Serve closes ln and waits for the accept loop and every handler,
// so a handler must return once its peer is gone (a test that leaves a
// connection open closes it first, in an earlier-registered Cleanup's
// reverse order).
func Serve(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(c)
			}()
		}
	}()
}
