package procfs

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fixtures in the kernel's formats (6.x): a comm with spaces and
// parentheses, utime 250 and stime 50 ticks; two CPUs of softnet_stat with
// 15 columns; /proc/net/snmp with UdpLite after Udp.
const (
	fixStat    = "4242 (bridge head (x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 12345 123456789 2000 18446744073709551615\n"
	fixStatus  = "Name:\tbridgehead\nUmask:\t0022\nState:\tS (sleeping)\nVmHWM:\t   40960 kB\nVmRSS:\t   30720 kB\nThreads:\t9\n"
	fixSNMP    = "Ip: Forwarding DefaultTTL\nIp: 2 64\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\nUdp: 100 1 7 50 6 0 0 0 0\nUdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\nUdpLite: 0 0 0 0 0 0 0 0 0\n"
	fixCPU     = "cpu  100 5 20 300 10 1 4 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 5 1 2 2\nctxt 99\nbtime 1700000000\nprocesses 10\nprocs_running 1\nprocs_blocked 0\nsoftirq 4 1 1 1 1 0 0 0 0 0 0\n"
	fixSoftnet = "0000a000 00000010 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n" +
		"0000b000 0000000f 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000\n"
)

// fixture writes files (path relative to the mount: "4242/stat") into a
// fresh folder and returns an FS on it.
func fixture(t testing.TB, files map[string]string) FS {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestProcess(t *testing.T) {
	fs := fixture(t, map[string]string{"4242/stat": fixStat, "4242/status": fixStatus, "4242/net/snmp": fixSNMP})
	cpu, err := fs.ProcessCPU(4242)
	if err != nil || cpu != 3 {
		t.Errorf("ProcessCPU = %g, %v; want 3 s", cpu, err)
	}
	rss, hwm, err := fs.ProcessMemory(4242)
	if err != nil || rss != 30720 || hwm != 40960 {
		t.Errorf("ProcessMemory = rss %d hwm %d, %v; want 30720 40960", rss, hwm, err)
	}
	u, err := fs.ProcessUDP(4242)
	if want := (UDP{InDatagrams: 100, NoPorts: 1, InErrors: 7, OutDatagrams: 50, RcvbufErrors: 6}); err != nil || u != want {
		t.Errorf("ProcessUDP = %+v, %v; want %+v", u, err, want)
	}
	if _, err := fs.ProcessCPU(4343); err == nil || !strings.Contains(err.Error(), "process 4343") {
		t.Errorf("missing process: err = %v", err)
	}
}

func TestProcessErrors(t *testing.T) {
	cases := []struct {
		name, file, body string
		read             func(FS) error
		want             string
	}{
		{"short stat", "stat", "4242 (x) S 1 2", func(f FS) error { _, err := f.ProcessCPU(1); return err }, "/proc/1/stat: 3 fields"},
		{"stat ending at the comm", "stat", "4242 (x)", func(f FS) error { _, err := f.ProcessCPU(1); return err }, "0 fields"},
		{"stat without comm", "stat", "4242 x S 1 2 3 4 5 6 7 8 9 10 11 12 13", func(f FS) error { _, err := f.ProcessCPU(1); return err }, "no ')'"},
		{"status without VmRSS", "status", "Name:\tx\nState:\tZ (zombie)\n", func(f FS) error { _, _, err := f.ProcessMemory(1); return err }, "no VmRSS"},
		{"snmp without Udp", "net/snmp", "Ip: Forwarding DefaultTTL\nIp: 2 64\n", func(f FS) error { _, err := f.ProcessUDP(1); return err }, "no Udp counters"},
		{"snmp names and values differ", "net/snmp", "Udp: InDatagrams NoPorts\nUdp: 1\n", func(f FS) error { _, err := f.ProcessUDP(1); return err }, "mismatch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.read(fixture(t, map[string]string{"1/" + c.file: c.body}))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestMachine(t *testing.T) {
	fs := fixture(t, map[string]string{"stat": fixCPU, "net/softnet_stat": fixSoftnet})
	c, err := fs.CPU()
	// Ticks of 1/100 s: total 440, busy 440-300-10 = 130, softirq 4.
	if err != nil || math.Abs(c.Total-4.4) > 1e-9 || math.Abs(c.Busy-1.3) > 1e-9 || math.Abs(c.SoftIRQ-0.04) > 1e-9 {
		t.Errorf("CPU = %+v, %v; want total 4.4, busy 1.3, softirq 0.04", c, err)
	}
	d, err := fs.SoftnetDrops()
	if err != nil || d != 31 {
		t.Errorf("SoftnetDrops = %g, %v; want 31", d, err)
	}
	empty := fixture(t, map[string]string{"stat": "ctxt 5\n"})
	if _, err := empty.CPU(); err == nil {
		t.Error("/proc/stat without a cpu line: no error")
	}
	if _, err := empty.SoftnetDrops(); err == nil {
		t.Error("no softnet_stat: no error")
	}
}

// TestLive reads this machine's /proc: the running test and the machine.
func TestLive(t *testing.T) {
	fs, err := New(DefaultMount)
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	if _, err := fs.ProcessCPU(pid); err != nil {
		t.Error(err)
	}
	if rss, _, err := fs.ProcessMemory(pid); err != nil || rss <= 0 {
		t.Errorf("ProcessMemory: %d KiB, %v", rss, err)
	}
	if _, err := fs.ProcessUDP(pid); err != nil {
		t.Error(err)
	}
	if c, err := fs.CPU(); err != nil || c.Busy <= 0 || c.Busy > c.Total {
		t.Errorf("CPU: %+v, %v", c, err)
	}
	if _, err := fs.SoftnetDrops(); err != nil {
		t.Error(err)
	}
}

// fuzzFile checks that reading arbitrary contents of one file never
// panics and that what is read without error is a finite count.
func fuzzFile(f *testing.F, file string, seed string, read func(FS) ([]float64, error)) {
	f.Add([]byte(seed))
	f.Add([]byte(""))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		fs, err := New(dir)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := read(fs)
		if err != nil {
			return
		}
		for _, v := range vs {
			if math.IsInf(v, 0) {
				t.Errorf("%s read as %v from %q", file, vs, b)
			}
		}
	})
}

func FuzzProcessCPU(f *testing.F) {
	fuzzFile(f, "1/stat", fixStat, func(fs FS) ([]float64, error) {
		v, err := fs.ProcessCPU(1)
		return []float64{v}, err
	})
}

func FuzzParseProcessStat(f *testing.F) {
	f.Add([]byte(fixStat))
	f.Add([]byte("1 (a) R 0 0 0 0 0 0 0 0 0 0 18446744073709551615 1 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseProcessStat(b)
		if err == nil && (v < 0 || math.IsNaN(v)) {
			t.Errorf("%q: %g s", b, v)
		}
	})
}

func FuzzProcessMemory(f *testing.F) {
	fuzzFile(f, "1/status", fixStatus, func(fs FS) ([]float64, error) {
		r, h, err := fs.ProcessMemory(1)
		return []float64{float64(r), float64(h)}, err
	})
}

func FuzzProcessUDP(f *testing.F) {
	fuzzFile(f, "1/net/snmp", fixSNMP, func(fs FS) ([]float64, error) {
		u, err := fs.ProcessUDP(1)
		return []float64{u.InDatagrams, u.RcvbufErrors}, err
	})
}

func FuzzCPU(f *testing.F) {
	fuzzFile(f, "stat", fixCPU, func(fs FS) ([]float64, error) {
		c, err := fs.CPU()
		return []float64{c.Total, c.Busy, c.SoftIRQ}, err
	})
}

func FuzzSoftnetDrops(f *testing.F) {
	fuzzFile(f, "net/softnet_stat", fixSoftnet, func(fs FS) ([]float64, error) {
		v, err := fs.SoftnetDrops()
		return []float64{v}, err
	})
}
