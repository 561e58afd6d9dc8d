package router

import (
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestNeedsRekeyInterval: Options.RekeyAfter shortens the initiator's
// rekey age and moves the responder's with it, never past the default.
func TestNeedsRekeyInterval(t *testing.T) {
	created := time.Unix(1000, 0)
	for _, tc := range []struct {
		name      string
		option    time.Duration
		initiator bool
		age       time.Duration
		want      bool
	}{
		{"default initiator young", 0, true, RekeyAfterTime - time.Second, false},
		{"default initiator due", 0, true, RekeyAfterTime, true},
		{"default responder waits", 0, false, RekeyAfterTime, false},
		{"default responder due", 0, false, responderRekeyAfter, true},
		{"short initiator due", 10 * time.Second, true, 10 * time.Second, true},
		{"short initiator young", 10 * time.Second, true, 9 * time.Second, false},
		{"short responder waits", 10 * time.Second, false, 54 * time.Second, false},
		{"short responder due", 10 * time.Second, false, 55 * time.Second, true},
		{"longer than default is ignored", 10 * time.Minute, true, RekeyAfterTime, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Router{set: settings{rekeyAfter: rekeyInterval(tc.option)}}
			kp := &bhcrypto.Keypair{Created: created, Initiator: tc.initiator}
			if got := r.needsRekey(kp, created.Add(tc.age)); got != tc.want {
				t.Errorf("needsRekey(age %v) = %v, want %v", tc.age, got, tc.want)
			}
		})
	}
}
