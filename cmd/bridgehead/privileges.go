package main

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// capSet is a process's effective capability bits.
type capSet uint64

func (c capSet) has(cap int) bool { return c&(1<<uint(cap)) != 0 }

// currentCaps reads this process's effective capabilities.
func currentCaps() (capSet, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3 fills two 32-bit halves
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("reading capabilities: %w", err)
	}
	return capSet(data[0].Effective) | capSet(data[1].Effective)<<32, nil
}

// errPrivileges is the one message `run` prints without CAP_NET_ADMIN.
var errPrivileges = errors.New("needs root or CAP_NET_ADMIN (TUN device, routes, forwarding), and CAP_BPF for the early-drop filter; " +
	"this process has no CAP_NET_ADMIN: run it as root (sudo) or under deploy/systemd/bridgehead.service")

// checkPrivileges refuses to go on without CAP_NET_ADMIN, before any step
// that would fail for want of it. Missing CAP_BPF is not an error here:
// the daemon then runs without the early-drop filter and says so.
func checkPrivileges(caps func() (capSet, error)) error {
	c, err := caps()
	if err != nil {
		return nil // unknown: let the steps themselves report
	}
	if !c.has(unix.CAP_NET_ADMIN) {
		return errPrivileges
	}
	return nil
}
