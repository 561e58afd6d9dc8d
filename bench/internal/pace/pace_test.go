package pace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestSendCountsLostProbesAndStopsAtOtherErrors(t *testing.T) {
	var calls []int
	sent, err := Send(context.Background(), time.Millisecond, func(i int) bool { return i < 5 }, func(i int) error {
		calls = append(calls, i)
		switch i {
		case 1:
			return fmt.Errorf("write: %w", syscall.ENOBUFS)
		case 3:
			return errors.New("boom")
		}
		return nil
	})
	if sent != 3 || err == nil || err.Error() != "boom" {
		t.Errorf("sent %d, err %v; want 3 (the ENOBUFS one counted) and boom", sent, err)
	}
	if fmt.Sprint(calls) != "[0 1 2 3]" {
		t.Errorf("calls %v, want [0 1 2 3]", calls)
	}
}

func TestSendPacesAndEndsWithMore(t *testing.T) {
	start := time.Now()
	sent, err := Send(context.Background(), 20*time.Millisecond, func(i int) bool { return i < 4 }, func(int) error { return nil })
	if sent != 4 || err != nil {
		t.Fatalf("sent %d, err %v; want 4, nil", sent, err)
	}
	if took := time.Since(start); took < 60*time.Millisecond {
		t.Errorf("4 probes 20 ms apart took %v, want at least 60 ms", took)
	}
}

func TestSendStopsWhenCtxEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sent, err := Send(ctx, time.Hour, func(int) bool { return true }, func(int) error { cancel(); return nil })
	if sent != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("sent %d, err %v; want 1, context.Canceled", sent, err)
	}
}

func TestDrainReturnsOnceDone(t *testing.T) {
	n := 0
	start := time.Now()
	var mu sync.Mutex
	Drain(context.Background(), &mu, func() bool {
		if !mu.TryLock() {
			n++ // held, as promised
		} else {
			mu.Unlock()
		}
		return n == 3
	})
	if n != 3 || time.Since(start) > 500*time.Millisecond {
		t.Errorf("done asked %d times in %v, want 3 well under the second", n, time.Since(start))
	}
	start = time.Now()
	Drain(context.Background(), &mu, func() bool { return false })
	if took := time.Since(start); took < time.Second {
		t.Errorf("never done: returned after %v, want a second", took)
	}
}
