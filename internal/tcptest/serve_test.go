package tcptest

import (
	"io"
	"net"
	"testing"
)

// TestServe: every connection reaches the handler, and the cleanup waits
// for the handlers (an echo handler returns at EOF).
func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 3)
	t.Run("serve", func(t *testing.T) {
		Serve(t, ln, func(c net.Conn) {
			defer c.Close()
			io.Copy(c, c)
			done <- struct{}{}
		})
		for range 3 {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("echo: %q, %v", buf, err)
			}
			c.Close()
		}
	})
	// The subtest's cleanup ran: the listener is closed and all three
	// handlers returned.
	if len(done) != 3 {
		t.Fatalf("%d handlers returned before the cleanup ended, want 3", len(done))
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("listener still accepting after the cleanup")
	}
}
