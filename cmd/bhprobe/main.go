// Command bhprobe is the traffic tool of the lab, the end-to-end tests and
// the benchmark harness: ICMP echo, a checksummed TCP transfer and single
// UDP datagrams, from a chosen source address. It is not installed on
// gateways.
//
//	bhprobe ping [-src ADDR] [-count N] [-timeout D] DST
//	bhprobe tcp-recv -listen ADDR:PORT [-timeout D]
//	bhprobe tcp-send [-src ADDR] -bytes N [-seed S] [-mbps R] DST:PORT
//	bhprobe udp-send [-src ADDR] [-size N] DST:PORT
//	bhprobe http-get URL
//	bhprobe udp-stream [-src ADDR] [-rate N] [-flows N] [-duration D] DST:PORT
//	bhprobe udp-sink -listen ADDR:PORT [-duration D]
//	bhprobe lb-watch -gateways A,B [-gateways6 A6,B6] -dests P,Q [-interval D]
//	bhprobe kubelet -listen ADDR:PORT -cert FILE -key FILE
//	bhprobe cni add|del -conf-dir D -bin-dir B -cache-dir C -netns PATH -id ID
//	bhprobe callbacks -target ADDR:PORT -ca FILE [-proxy URL] [-echo N] [-logs N] [-duration D] [-bytes N]
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bhprobe ping|tcp-recv|tcp-send|udp-send|http-get|udp-stream|udp-sink|lb-watch ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "ping":
		err = ping(os.Args[2:])
	case "tcp-recv":
		err = tcpRecv(os.Args[2:])
	case "tcp-send":
		err = tcpSend(os.Args[2:])
	case "udp-send":
		err = udpSend(os.Args[2:])
	case "http-get":
		err = httpGet(os.Args[2:])
	case "udp-stream":
		err = udpStream(os.Args[2:])
	case "udp-sink":
		err = udpSink(os.Args[2:])
	case "lb-watch":
		err = lbWatch(os.Args[2:])
	case "kubelet":
		err = kubelet(os.Args[2:])
	case "callbacks":
		err = callbacks(os.Args[2:])
	case "cni":
		err = cni(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bhprobe:", err)
		os.Exit(1)
	}
}

func ping(args []string) error {
	fs := flag.NewFlagSet("ping", flag.ExitOnError)
	src := fs.String("src", "", "source address")
	count := fs.Int("count", 3, "echo requests")
	timeout := fs.Duration("timeout", 2*time.Second, "wait per reply")
	size := fs.Int("size", 56, "payload bytes")
	allowLoss := fs.Int("allow-loss", 0, "unanswered requests tolerated (path-MTU discovery may cost the first)")
	fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("ping: want one destination")
	}
	dst, err := netip.ParseAddr(fs.Arg(0))
	if err != nil {
		return err
	}
	network, listen, proto := "ip4:icmp", "0.0.0.0", 1
	var reqType, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.Is6() {
		network, listen, proto = "ip6:ipv6-icmp", "::", 58
		reqType, replyType = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	if *src != "" {
		listen = *src
	}
	c, err := icmp.ListenPacket(network, listen)
	if err != nil {
		return err
	}
	defer c.Close()
	id := os.Getpid() & 0xffff
	lost := 0
	payload := make([]byte, *size)
	for seq := 1; seq <= *count; seq++ {
		msg := icmp.Message{Type: reqType, Body: &icmp.Echo{ID: id, Seq: seq, Data: payload}}
		b, err := msg.Marshal(nil)
		if err != nil {
			return err
		}
		start := time.Now()
		if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return err
		}
		got := false
		deadline := start.Add(*timeout)
		buf := make([]byte, 65536)
		for !got {
			c.SetReadDeadline(deadline)
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || m.Type != replyType {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && e.Seq == seq {
				got = true
				fmt.Printf("reply from %s: seq=%d time=%.3f ms\n", dst, seq, float64(time.Since(start).Microseconds())/1000)
			}
		}
		if !got {
			lost++
			fmt.Printf("no reply from %s: seq=%d\n", dst, seq)
		}
		if seq < *count {
			time.Sleep(200 * time.Millisecond)
		}
	}
	fmt.Printf("%d sent, %d received\n", *count, *count-lost)
	if lost > *allowLoss {
		return fmt.Errorf("%d of %d echo requests to %s unanswered", lost, *count, dst)
	}
	return nil
}

func tcpRecv(args []string) error {
	fs := flag.NewFlagSet("tcp-recv", flag.ExitOnError)
	listen := fs.String("listen", "", "address:port")
	timeout := fs.Duration("timeout", 120*time.Second, "overall timeout")
	fs.Parse(args)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("listening", ln.Addr())
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(*timeout))
	conn, err := ln.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(*timeout))
	h := sha256.New()
	n, err := io.Copy(h, conn)
	if err != nil {
		return err
	}
	fmt.Printf("received %d bytes sha256 %s from %s\n", n, hex.EncodeToString(h.Sum(nil)), conn.RemoteAddr())
	return nil
}

func tcpSend(args []string) error {
	fs := flag.NewFlagSet("tcp-send", flag.ExitOnError)
	src := fs.String("src", "", "source address")
	total := fs.Int64("bytes", 100<<20, "bytes to send")
	seed := fs.Uint64("seed", 1, "seed of the pseudo-random content")
	timeout := fs.Duration("timeout", 120*time.Second, "overall timeout")
	mbps := fs.Float64("mbps", 0, "if > 0, pace the stream to this many Mbit/s")
	fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("tcp-send: want one destination")
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	if *src != "" {
		a, err := netip.ParseAddr(*src)
		if err != nil {
			return err
		}
		d.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
	}
	conn, err := d.Dial("tcp", fs.Arg(0))
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(*timeout))
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{byte(*seed), byte(*seed >> 8), byte(*seed >> 16), byte(*seed >> 24)})
	buf := make([]byte, 64<<10)
	start := time.Now()
	for sent := int64(0); sent < *total; {
		chunk := buf[:min(int64(len(buf)), *total-sent)]
		rng.Read(chunk)
		h.Write(chunk)
		n, err := conn.Write(chunk)
		if err != nil {
			return err
		}
		sent += int64(n)
		if *mbps > 0 {
			due := start.Add(time.Duration(float64(sent) * 8 / (*mbps * 1e6) * float64(time.Second)))
			time.Sleep(time.Until(due))
		}
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	// Wait for the receiver to close so every byte is acknowledged.
	io.Copy(io.Discard, conn)
	el := time.Since(start)
	fmt.Printf("sent %d bytes sha256 %s in %.2fs (%.1f Mbit/s)\n", *total, hex.EncodeToString(h.Sum(nil)), el.Seconds(), float64(*total)*8/el.Seconds()/1e6)
	return nil
}

func udpSend(args []string) error {
	fs := flag.NewFlagSet("udp-send", flag.ExitOnError)
	src := fs.String("src", "", "source address")
	size := fs.Int("size", 32, "payload bytes")
	count := fs.Int("count", 1, "datagrams")
	fill := fs.Int("fill", -1, "if >= 0, the first payload byte (the rest stays zero)")
	fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("udp-send: want one destination")
	}
	dst, err := netip.ParseAddrPort(fs.Arg(0))
	if err != nil {
		return err
	}
	c, err := dialUDP(*src, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	payload := make([]byte, *size)
	if *fill >= 0 && *size > 0 {
		payload[0] = byte(*fill)
	}
	for range *count {
		if _, err := c.Write(payload); err != nil {
			return err
		}
	}
	fmt.Printf("sent %d datagrams of %d bytes to %s from %s\n", *count, *size, dst, c.LocalAddr())
	return nil
}

func httpGet(args []string) error {
	fs := flag.NewFlagSet("http-get", flag.ExitOnError)
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("http-get: want one URL")
	}
	c := http.Client{Timeout: *timeout}
	resp, err := c.Get(fs.Arg(0))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", fs.Arg(0), resp.Status)
	}
	return nil
}

// dialUDP connects a UDP socket to dst, from src when it is not empty.
func dialUDP(src string, dst netip.AddrPort) (*net.UDPConn, error) {
	var laddr *net.UDPAddr
	if src != "" {
		a, err := netip.ParseAddr(src)
		if err != nil {
			return nil, err
		}
		laddr = &net.UDPAddr{IP: a.AsSlice()}
	}
	return net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(dst))
}
