package tcptest

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// TestForward: bytes cross the proxy both ways; a connection still open
// when the test ends is closed by the cleanup rather than hanging it; an
// upstream that refuses makes the proxy close the client's connection.
func TestForward(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, up, func(c net.Conn) { defer c.Close(); io.Copy(c, c) })
	var held net.Conn
	t.Run("forward", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		Forward(t, ln, up.Addr().String())
		held, err = net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := held.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(held).ReadString('\n')
		if err != nil || line != "ping\n" {
			t.Fatalf("echo through the proxy: %q, %v", line, err)
		}
	})
	// The subtest's cleanup closed the proxy's side: the held connection
	// reads EOF (or a reset) instead of blocking.
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil {
		t.Fatal("held connection still open after the proxy's test ended")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("held connection not closed by the proxy's cleanup")
	}
	held.Close()

	t.Run("refused", func(t *testing.T) {
		dead, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := dead.Addr().String()
		dead.Close()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		Forward(t, ln, addr)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("read a byte from a proxy whose upstream refuses")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("proxy kept the connection open although upstream refused")
		}
	})
}
