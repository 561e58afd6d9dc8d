// Package rxstamp reads the time the kernel stamped on a received datagram
// (SO_TIMESTAMPNS), so that the harness's round-trip times end when the
// reply reached the pod's socket, not when the harness's goroutine got to
// read it. Under load the second is later by the harness's own scheduling
// delay (its process shares the pod namespace's CPUs with iperf3), which is
// the lab's, not the tunnel's; iputils ping measures the same way.
package rxstamp

import (
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OOBSize is enough out-of-band space for one timestamp message.
var OOBSize = unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{})))

// Enable turns on receive timestamps on c's socket.
func Enable(c syscall.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_TIMESTAMPNS: %w", serr)
	}
	return nil
}

// ErrNoStamp is returned by Parse when oob holds no receive timestamp.
var ErrNoStamp = errors.New("no SCM_TIMESTAMPNS message")

// Parse returns the receive timestamp in oob, the out-of-band bytes of a
// read from a socket that Enable set up.
func Parse(oob []byte) (time.Time, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, err
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPNS {
			continue
		}
		if len(m.Data) < int(unsafe.Sizeof(unix.Timespec{})) {
			return time.Time{}, fmt.Errorf("SCM_TIMESTAMPNS of %d bytes", len(m.Data))
		}
		ts := *(*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
		return time.Unix(ts.Unix()), nil
	}
	return time.Time{}, ErrNoStamp
}
