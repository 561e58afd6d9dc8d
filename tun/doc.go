// Package tun holds the inside of the tunnel: the layer-3 devices that carry
// pod and node traffic between the kernel and the router.
//
// Backends:
//
//   - Offload (Linux): a TUN opened with virtio-net headers through
//     golang.zx2c4.com/wireguard/tun, with TCP and UDP segmentation and
//     checksum offloads. Read splits the kernel's 64 KiB super-packets into
//     up to 128 packets per call; Write coalesces runs of one flow (GRO),
//     which needs buffers with spare capacity: cap(bufs[i])-offset up to
//     OffloadWriteBufferSize. TCP runs are merged here (tcpmerge.go) and
//     handed to the kernel checksum-partial, trusting the checksums as
//     kernel WireGuard does after decryption; UDP goes through the
//     library's GRO. OpenOffload fails cleanly where the kernel or
//     the environment does not allow it; fall back to Water then.
//     OpenOffloadQueues opens several queues of one interface
//     (IFF_MULTI_QUEUE), one per router lane; the kernel spreads flows
//     over them.
//   - Water (Linux): a TUN opened through github.com/songgao/water
//     (portable, one packet per system call). OpenWaterQueues opens
//     several queues of one IFF_MULTI_QUEUE interface for the lanes when
//     offloads are off or unavailable.
//   - Channel: an in-memory device for tests.
package tun
