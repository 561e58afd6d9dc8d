package kubenode

import (
	"strings"
	"testing"
)

// TestWithNetworkPolicy: the state ends the message, and a long message
// is cut before it, never the state.
func TestWithNetworkPolicy(t *testing.T) {
	long := strings.Repeat("x", 2*maxMessage)
	for _, c := range []struct {
		msg, state, want string
	}{
		{"CNI config written", "", "CNI config written"},
		{"CNI config written", NetworkPolicyEnforced, "CNI config written; network policy: enforced"},
		{long[:maxMessage], NetworkPolicyOff, long[:maxMessage-len("; network policy: ")-len(NetworkPolicyOff)-3] + "...; network policy: " + NetworkPolicyOff},
	} {
		got := withNetworkPolicy(c.msg, c.state)
		if got != c.want || len(got) > maxMessage {
			t.Errorf("%.40q + %q = %.60q (%d bytes), want %.60q", c.msg, c.state, got, len(got), c.want)
		}
		if st, ok := NetworkPolicyState(got); c.state != "" && (!ok || st != c.state) {
			t.Errorf("state read back %q %v", st, ok)
		}
	}
}
