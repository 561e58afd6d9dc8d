package udp

import "errors"

// Argument errors shared by the binds. They signal caller bugs.
var (
	errNoBuffer = errors.New("udp: Receive needs at least one buffer, size and endpoint")
)

// SendReason is why the kernel refused to send a datagram. LinuxBind
// counts refused datagrams by reason (SendFailures); the String values
// are meant as metric labels and stay stable.
type SendReason uint8

// Send refusal reasons, by the error the kernel returned.
const (
	SendUnreachable SendReason = iota // ENETUNREACH, EHOSTUNREACH, ENETDOWN, EHOSTDOWN: no route, or an unreachable one
	SendProhibited                    // EACCES, EPERM: a prohibit route or a firewall rule
	SendInvalid                       // EINVAL: a blackhole route, among others
	SendTooBig                        // EMSGSIZE: larger than the socket or the path allows
	SendNoBuffers                     // ENOBUFS, ENOMEM: the kernel or a device queue is out of room
	SendOther                         // anything else
	NumSendReasons
)

var sendReasonNames = [NumSendReasons]string{
	SendUnreachable: "unreachable",
	SendProhibited:  "prohibited",
	SendInvalid:     "invalid",
	SendTooBig:      "too_big",
	SendNoBuffers:   "no_buffers",
	SendOther:       "other",
}

func (r SendReason) String() string {
	if r < NumSendReasons {
		return sendReasonNames[r]
	}
	return "unknown"
}
