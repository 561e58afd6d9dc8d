package daemon

import (
	"slices"
	"testing"
)

// TestUndoStack: unwind runs the undos last pushed first, skips the
// dropped ones (ownership passed on), and runs each once however often
// it is called.
func TestUndoStack(t *testing.T) {
	var u undoStack
	var ran []string
	push := func(name string) func() {
		return u.push(func() { ran = append(ran, name) })
	}
	push("follower")
	dropDevices := push("devices")
	push("routes")
	push("control socket")
	dropDevices()
	u.unwind()
	u.unwind()
	if want := []string{"control socket", "routes", "follower"}; !slices.Equal(ran, want) {
		t.Fatalf("unwound %q, want %q", ran, want)
	}
}
