//go:build linux

package tun

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SetSteering attaches the steering program progFD (a socket filter
// program, such as package steer's) to the multi-queue interface of d,
// an attached queue of it (OpenOffloadQueues, OpenWaterQueues), with
// TUNSETSTEERINGEBPF; progFD -1 detaches the program. From then on the
// kernel puts each packet it routes into the interface on the queue the
// program returns, modulo the number of attached queues, instead of
// choosing by flow hash.
//
// The program belongs to the interface, not to d: any of its queues
// attaches or detaches it, and it stays attached when d is closed, until
// the interface goes away. The interface takes its own reference, so the
// caller may close progFD afterwards. Safe to call concurrently with Read
// and Write on any queue.
func SetSteering(d Device, progFD int) error {
	return queueControl(d, "steering", func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETSTEERINGEBPF, progFD); err != nil {
			return fmt.Errorf("TUNSETSTEERINGEBPF with program fd %d: %w", progFD, err)
		}
		return nil
	})
}
