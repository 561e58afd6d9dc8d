package router

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

var errBroken = errors.New("device broken")

// brokenTUN fails every read, as a TUN whose interface was deleted does.
type brokenTUN struct{ nullTUN }

func (*brokenTUN) Read([][]byte, []int, int) (int, error) { return 0, errBroken }

// brokenBind fails every receive.
type brokenBind struct{ captureBind }

func (*brokenBind) Receive([][]byte, []int, []netip.AddrPort) (int, error) { return 0, errBroken }

func newBrokenBind() *brokenBind { return &brokenBind{*newCaptureBind("192.0.2.1:51820")} }

// TestRunAllLoopsFail: when every device fails at once, every loop Run
// started may report its error; Run must return one and leave no
// goroutine behind (TestMain checks), whatever loops the options add.
// Every loop hands its result over, error or not, so a loop without a
// slot of its own would block for ever, and Run with it, at every exit:
// the steered express lane adds two loops to the lanes' two each and
// the handshake loop.
func TestRunAllLoopsFail(t *testing.T) {
	tests := []struct {
		name    string
		lanes   int
		express bool
		steered bool
		loops   int
	}{
		{"one lane", 1, false, false, 3},
		{"three lanes", 3, false, false, 7},
		{"express lane", 1, true, false, 4},
		{"steered express lane", 1, true, true, 5},
		{"steered express lane, three lanes", 3, true, true, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{TUN: &brokenTUN{nullTUN{batch: 64}}, Bind: newBrokenBind(), Identity: newIdentity(t, bhcrypto.AESGCM), Clock: newFakeClock()}
			for range tt.lanes - 1 {
				o.Lanes = append(o.Lanes, Lane{TUN: &brokenTUN{nullTUN{batch: 64}}, Bind: newBrokenBind()})
			}
			if tt.express {
				o.Express = newBrokenBind()
			}
			if tt.steered {
				o.ExpressTUN, o.ExpressSteered = &brokenTUN{nullTUN{batch: 64}}, true
			}
			r, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(r.loops()); n != tt.loops {
				t.Errorf("%d loops, want %d", n, tt.loops)
			}
			done := make(chan error, 1)
			go func() { done <- r.Run(context.Background()) }()
			select {
			case err := <-done:
				if !errors.Is(err, errBroken) {
					t.Errorf("Run = %v, want a loop's %v", err, errBroken)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return after every device failed: a loop is stuck handing over its error")
			}
		})
	}
}
