package sched

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Policy
		err  string
	}{
		{"", Policy{}, ""},
		{"fifo:10", Policy{Kind: unix.SCHED_FIFO, Priority: 10}, ""},
		{"FIFO:1", Policy{Kind: unix.SCHED_FIFO, Priority: 1}, ""},
		{"rr:99", Policy{Kind: unix.SCHED_RR, Priority: 99}, ""},
		{"fifo", Policy{}, "want fifo:PRIO"},
		{"fifo:0", Policy{}, "not 1..99"},
		{"fifo:100", Policy{}, "not 1..99"},
		{"rr:-1", Policy{}, "not 1..99"},
		{"fifo:x", Policy{}, "not 1..99"},
		{"deadline:5", Policy{}, "unknown policy"},
		{"other:0", Policy{}, "unknown policy"},
		{"slice:200", Policy{Slice: 200 * time.Microsecond}, ""},
		{"slice:99", Policy{}, "not 100..100000"},
		{"slice:100001", Policy{}, "not 100..100000"},
	} {
		got, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in)) {
				t.Errorf("Parse(%q) = %v, %v; want an error naming the input and %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := Parse(got.String()); err != nil || back != got {
			t.Errorf("Parse(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "fifo:10", "rr:99", "fifo:", ":", "rr:1:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			return
		}
		if back, err := Parse(p.String()); err != nil || back != p {
			t.Fatalf("Parse(%q) = %v; its String %q parses to %v, %v", s, p, p.String(), back, err)
		}
		if !p.IsZero() && (p.Priority < 1 || p.Priority > 99) {
			t.Fatalf("Parse(%q) = %v: priority out of range", s, p)
		}
	})
}

// The child of the root tests: a multi-threaded process that starts 16
// more threads when told (a line on stdin) and says when it has.
func TestMain(m *testing.M) {
	if os.Getenv("BDP_SCHED_CHILD") == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

func child() {
	in := bufio.NewScanner(os.Stdin)
	hold := make(chan struct{})
	spawn := func(n int) {
		ready := make(chan struct{})
		for range n {
			go func() {
				runtime.LockOSThread() // keeps this thread; the runtime starts another for the rest
				ready <- struct{}{}
				<-hold
			}()
		}
		for range n {
			<-ready
		}
	}
	spawn(3)
	fmt.Println("ready")
	for in.Scan() {
		spawn(16)
		fmt.Println("more")
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (CI is set: not skipping)")
		}
		t.Skip("needs root (sched_setattr with a real-time policy)")
	}
}

type childProc struct {
	cmd   *exec.Cmd
	stdin *os.File
	out   *bufio.Scanner
}

func startChild(t *testing.T) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BDP_SCHED_CHILD=1")
	cmd.Stderr = os.Stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = r
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	c := &childProc{cmd: cmd, stdin: w, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		w.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	c.expect(t, "ready")
	return c
}

func (c *childProc) expect(t *testing.T, line string) {
	t.Helper()
	if !c.out.Scan() || c.out.Text() != line {
		t.Fatalf("child said %q (%v), want %q", c.out.Text(), c.out.Err(), line)
	}
}

// TestApply: every thread of a process is under the policy after Apply
// (read back with sched_getattr), and threads it starts afterwards
// inherit a real-time policy (Linux gives a new thread the default slice,
// so Keep sets a slice on new threads itself).
func TestApply(t *testing.T) {
	requireRoot(t)
	for _, spec := range []string{"fifo:10", "rr:5", "slice:200"} {
		t.Run(spec, func(t *testing.T) {
			p, err := Parse(spec)
			if err != nil {
				t.Fatal(err)
			}
			c := startChild(t)
			pid := c.cmd.Process.Pid
			if under, total, err := p.Count(pid); err != nil || under != 0 || total < 4 {
				t.Fatalf("before Apply: %d of %d threads under %s (%v); want 0 of >= 4", under, total, p, err)
			}
			n, err := p.Apply(pid)
			if err != nil {
				t.Fatal(err)
			}
			under, total, err := p.Count(pid)
			// A thread the runtime starts meanwhile is not counted in n but
			// inherits the policy.
			if err != nil || under != total || n < 4 || n > total {
				t.Fatalf("after Apply: set %d, %d of %d threads under %s (%v)", n, under, total, p, err)
			}
			pol, err := unix.SchedGetAttr(pid, 0)
			if err != nil || int(pol.Policy) != p.Kind || int(pol.Priority) != p.Priority {
				t.Fatalf("main thread: sched_getattr = %+v, %v; want policy %d priority %d", pol, err, p.Kind, p.Priority)
			}
			if p.Slice > 0 {
				if pol.Runtime != uint64(p.Slice) {
					t.Fatalf("main thread: slice %d ns, want %d", pol.Runtime, p.Slice)
				}
				return
			}
			fmt.Fprintln(c.stdin, "more")
			c.expect(t, "more")
			under2, total2, err := p.Count(pid)
			// 19 locked threads and sysmon: some threads are new, whatever
			// idle ones the runtime had.
			if err != nil || total2 <= total || total2 < 20 || under2 != total2 {
				t.Fatalf("after 16 more locked threads: %d of %d under %s (%v); want all of > %d and >= 20", under2, total2, p, err, total)
			}
		})
	}
}

// TestKeeper: Keep applies at once and keeps applying; Stop ends it
// without an error while the process lives, and the first pass's error is
// Keep's (a process that does not exist).
func TestKeeper(t *testing.T) {
	requireRoot(t)
	p := Policy{Kind: unix.SCHED_FIFO, Priority: 3}
	c := startChild(t)
	pid := c.cmd.Process.Pid
	k, err := Keep(p, 10*time.Millisecond, pid)
	if err != nil {
		t.Fatal(err)
	}
	// Set one thread back to SCHED_OTHER (0): a later pass puts it under
	// p again.
	if err := unix.SchedSetAttr(pid, &unix.SchedAttr{Policy: 0}, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		under, total, err := p.Count(pid)
		if err != nil {
			t.Fatal(err)
		}
		if under == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d threads under %s 5 s after one was set back", under, total, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}

	if _, err := Keep(p, time.Second, 1<<30); err == nil {
		t.Fatal("Keep on a process that does not exist: no error")
	}
}
