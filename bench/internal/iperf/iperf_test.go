package iperf

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse(t *testing.T) {
	r, err := Parse(read(t, "iperf3-tcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.UDP || r.Bytes != 2625503232 || math.Abs(r.BitsPerSecond-20999846886.469593) > 1e-3 || r.Retransmits != 0 {
		t.Errorf("tcp: %+v", r)
	}
	r, err = Parse(read(t, "iperf3-tcp-p2-reverse.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 1723334656 || r.Retransmits != 7 {
		t.Errorf("tcp -P 2 -R: %+v", r)
	}
	r, err = Parse(read(t, "iperf3-udp64.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.UDP || r.Packets != 166316 || r.LostPackets != 97959 || math.Abs(r.LostPercent-58.89790764790765) > 1e-9 {
		t.Errorf("udp: %+v", r)
	}
	// 166316-97959 datagrams of 64 bytes are the 4374848 bytes received.
	if got, want := r.DeliveredPPS(), 68357/1.000057; math.Abs(got-want) > 1e-6 {
		t.Errorf("DeliveredPPS = %g, want %g", got, want)
	}
	if _, err := Parse([]byte(`{"start":{},"intervals":[],"end":{},"error":"unable to connect to server: Connection refused"}`)); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("error JSON: err = %v", err)
	}
	if _, err := Parse([]byte(`{"end":{}}`)); err == nil {
		t.Error("JSON without sums: no error")
	}
	if _, err := Parse([]byte(`not json`)); err == nil {
		t.Error("garbage: no error")
	}
}

func TestRun(t *testing.T) {
	tcp := string(read(t, "iperf3-tcp.json"))
	cases := []struct {
		name    string
		outputs []string
		errs    []error
		calls   int
		wantErr string
	}{
		{"first try", []string{tcp}, []error{nil}, 1, ""},
		// iperf3 exits non-zero with an "error" JSON while the server is
		// busy with the previous test; the next try succeeds.
		{"retry after server busy", []string{`{"end":{},"error":"the server is busy running a test"}`, tcp}, []error{errors.New("exit status 1"), nil}, 2, ""},
		{"text before the JSON", []string{"warning: something\n" + tcp}, []error{nil}, 1, ""},
		{"no JSON, three tries", []string{"", "", ""}, []error{errors.New("exit status 1"), errors.New("exit status 1"), errors.New("exit status 2")}, 3, "exit status 2"},
		{"no JSON, no error", []string{"", "", ""}, []error{nil, nil, nil}, 3, "no JSON output"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			exec := func(ctx context.Context, args ...string) (string, error) {
				if len(args) != 2 || args[0] != "iperf3" {
					t.Errorf("args %q", args)
				}
				i := calls
				calls++
				return c.outputs[i], c.errs[i]
			}
			r, err := Run(context.Background(), exec, []string{"iperf3", "-J"}, time.Second)
			if calls != c.calls {
				t.Errorf("%d calls, want %d", calls, c.calls)
			}
			if c.wantErr == "" {
				if err != nil || r.Bytes != 2625503232 {
					t.Errorf("%+v, %v", r, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("err = %v, want %q", err, c.wantErr)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, func(context.Context, ...string) (string, error) { return "", errors.New("boom") }, []string{"iperf3"}, time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, n := range []string{"iperf3-tcp.json", "iperf3-tcp-p2-reverse.json", "iperf3-udp64.json"} {
		f.Add(read(f, n))
	}
	f.Add([]byte(`{"end":{},"error":"x"}`))
	f.Add([]byte(`{"start":{"test_start":{"protocol":"UDP"}},"end":{"sum_sent":{},"sum_received":{"seconds":0}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		if !r.UDP && (r.Packets != 0 || r.LostPackets != 0) {
			t.Errorf("TCP result with datagram counts: %+v", r)
		}
		r.DeliveredPPS() // no panic, also for zero seconds
	})
}
