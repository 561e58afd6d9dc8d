//go:build linux

package tun

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// requireNetns is enterNetns that fails instead of skipping under CI=true.
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Getenv("CI") != "" && os.Geteuid() != 0 {
		t.Fatal("CI=true: this test needs root (network namespaces, /dev/net/tun)")
	}
	enterNetns(t)
}

// TestOffloadQueuesSpreadFlows opens four queues of one interface, sends 64
// UDP flows into it and checks that every queue reads packets, that the
// kernel keeps each flow on one queue, and that every packet arrives.
func TestOffloadQueuesSpreadFlows(t *testing.T) {
	requireNetns(t)
	const queues = 4
	devs, err := OpenOffloadQueues(OffloadConfig{Name: "bl-mq0", MTU: 1420}, queues, nil)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	checkQueuesSpreadFlows(t, "bl-mq0", devs)
}

// TestWaterQueuesSpreadFlows: the portable backend's queues (songgao/water
// with IFF_MULTI_QUEUE) spread flows as the offload queues do.
func TestWaterQueuesSpreadFlows(t *testing.T) {
	requireNetns(t)
	devs, err := OpenWaterQueues(WaterConfig{Name: "bl-wq0", MTU: 1420}, 4)
	if err != nil {
		t.Fatal(err)
	}
	checkQueuesSpreadFlows(t, "bl-wq0", devs)
}

// checkQueuesSpreadFlows addresses and brings up ifname, whose queues are
// devs, sends 64 UDP flows into it and checks that every queue reads
// packets, that the kernel keeps each flow on one queue, and that every
// packet arrives. It closes devs.
func checkQueuesSpreadFlows(t *testing.T, ifname string, devs []Device) {
	t.Helper()
	const flows, perFlow = 64, 8
	queues := len(devs)
	for i, d := range devs {
		if d.Name() != ifname || d.MTU() != 1420 {
			t.Fatalf("queue %d: name %q mtu %d", i, d.Name(), d.MTU())
		}
	}
	ip(t, "addr", "add", "10.77.0.1/24", "dev", ifname)
	ip(t, "link", "set", ifname, "up")

	// seen[q][flow] counts packets of a flow read from queue q. A flow is
	// its source and destination port (source << 16 | destination): the
	// kernel may give a later flow a closed one's source port.
	var mu sync.Mutex
	seen := make([]map[uint32]int, queues)
	var wg sync.WaitGroup
	for q, d := range devs {
		seen[q] = map[uint32]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			bs := d.BatchSize()
			bufs, sizes := make([][]byte, bs), make([]int, bs)
			for i := range bufs {
				bufs[i] = make([]byte, testOffset+1500)
			}
			for {
				n, err := d.Read(bufs, sizes, testOffset)
				if err != nil {
					return
				}
				mu.Lock()
				for i := range n {
					pkt := bufs[i][testOffset : testOffset+sizes[i]]
					if len(pkt) >= 28 && pkt[0]>>4 == 4 && pkt[9] == 17 {
						seen[q][binary.BigEndian.Uint32(pkt[20:24])]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	defer func() {
		for _, d := range devs {
			d.Close()
		}
		wg.Wait()
	}()

	ports := make(map[uint32]bool, flows)
	for f := range flows {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: 9000 + f})
		if err != nil {
			t.Fatal(err)
		}
		ports[uint32(c.LocalAddr().(*net.UDPAddr).Port)<<16|uint32(9000+f)] = true
		for range perFlow {
			if _, err := c.Write([]byte("lane test payload")); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for q := range seen {
			for p, c := range seen[q] {
				if ports[p] {
					n += c
				}
			}
		}
		return n
	}
	for total() < flows*perFlow && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	onQueue := map[uint32]int{}
	got := 0
	perQueue := make([]int, queues)
	for q := range seen {
		for p, c := range seen[q] {
			if !ports[p] {
				continue
			}
			if prev, ok := onQueue[p]; ok {
				t.Errorf("flow from port %d to %d read on queues %d and %d", p>>16, p&0xffff, prev, q)
			}
			onQueue[p] = q
			perQueue[q] += c
			got += c
		}
	}
	t.Logf("packets per queue: %v", perQueue)
	if got != flows*perFlow {
		t.Errorf("read %d packets, want %d", got, flows*perFlow)
	}
	for q, c := range perQueue {
		if c == 0 {
			t.Errorf("queue %d read nothing of %d flows: %v", q, flows, fmt.Sprint(perQueue))
		}
	}
}

func TestOffloadQueuesBadCount(t *testing.T) {
	for _, n := range []int{0, -1, MaxQueues + 1} {
		if _, err := OpenOffloadQueues(OffloadConfig{Name: "bl-mqbad", MTU: 1420}, n, nil); err == nil {
			t.Errorf("%d queues: no error", n)
		}
	}
}

// TestDetachQueueWritesOnly: a detached queue gets none of the flows the
// kernel routes into the interface (the other queues read every packet),
// and a packet written to it still enters the stack; for both backends.
func TestDetachQueueWritesOnly(t *testing.T) {
	t.Run("offload", func(t *testing.T) {
		requireNetns(t)
		devs, err := OpenOffloadQueues(OffloadConfig{Name: "bl-mqd", MTU: 1420}, 3, nil)
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
		checkDetachQueue(t, "bl-mqd", devs)
	})
	t.Run("water", func(t *testing.T) {
		requireNetns(t)
		devs, err := OpenWaterQueues(WaterConfig{Name: "bl-wqd", MTU: 1420}, 3)
		if err != nil {
			t.Fatal(err)
		}
		checkDetachQueue(t, "bl-wqd", devs)
	})
}

// checkDetachQueue detaches the last of devs, queues of ifname, and
// checks that the others read every packet the kernel routes into it and
// that a packet written to the detached one arrives. It closes devs.
func checkDetachQueue(t *testing.T, ifname string, devs []Device) {
	t.Helper()
	w := devs[len(devs)-1]
	defer w.Close()
	if err := DetachQueue(w); err != nil {
		for _, d := range devs[:len(devs)-1] {
			d.Close()
		}
		t.Fatal(err)
	}
	// Written to the detached queue: 10.77.0.2:5000 -> 10.77.0.1:7000.
	write := func(t *testing.T) {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 0, 1), Port: 7000})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		payload := []byte("written to a detached queue")
		pkt := make([]byte, 28+len(payload))
		pkt[0], pkt[8], pkt[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
		copy(pkt[12:16], net.IPv4(10, 77, 0, 2).To4())
		copy(pkt[16:20], net.IPv4(10, 77, 0, 1).To4())
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(pkt[i:]))
		}
		for sum > 0xffff {
			sum = sum>>16 + sum&0xffff
		}
		binary.BigEndian.PutUint16(pkt[10:], ^uint16(sum))
		binary.BigEndian.PutUint16(pkt[20:], 5000)
		binary.BigEndian.PutUint16(pkt[22:], 7000)
		binary.BigEndian.PutUint16(pkt[24:], uint16(8+len(payload)))
		copy(pkt[28:], payload)
		buf := make([]byte, testOffset+len(pkt))
		copy(buf[testOffset:], pkt)
		if _, err := w.Write([][]byte{buf}, testOffset); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, 100)
		n, from, err := c.ReadFromUDP(got)
		if err != nil {
			t.Fatalf("nothing arrived from the detached queue: %v", err)
		}
		if string(got[:n]) != string(payload) || from.Port != 5000 {
			t.Fatalf("got %q from %v", got[:n], from)
		}
	}
	// checkQueuesSpreadFlows brings the interface up and checks that the
	// two attached queues read all 512 packets; then write.
	checkQueuesSpreadFlows(t, ifname, devs[:len(devs)-1])
	write(t)
}
