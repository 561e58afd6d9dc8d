package fq

import (
	"fmt"
	"testing"
)

// BenchmarkEnqueueDequeue is the cost of one packet through the queue
// (one Enqueue and one Dequeue) with packets spread over 1, 16 or 1024
// active flows, 256 queued.
func BenchmarkEnqueueDequeue(b *testing.B) {
	for _, flows := range []int{1, 16, 1024} {
		b.Run(fmt.Sprintf("flows=%d", flows), func(b *testing.B) {
			const packets = 2048
			free := make([]int32, 0, packets)
			for i := range packets {
				free = append(free, int32(i))
			}
			q, err := New(Config{Packets: packets, Bytes: packets * 1500, Drop: func(s int32, _ Reason) { free = append(free, s) }})
			if err != nil {
				b.Fatal(err)
			}
			hashes := make([]uint64, flows)
			for i := range hashes {
				hashes[i] = uint64(i) * 0x9e3779b97f4a7c15
			}
			var now int64
			for i := range 256 {
				s := free[len(free)-1]
				free = free[:len(free)-1]
				q.Enqueue(s, hashes[i%flows], 1400, false, now)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s := free[len(free)-1]
				free = free[:len(free)-1]
				q.Enqueue(s, hashes[i%flows], 1400, false, now)
				if s, _, ok := q.Dequeue(now); ok {
					free = append(free, s)
				}
				now += 1000 // 1 µs per packet: no standing delay
			}
		})
	}
}
