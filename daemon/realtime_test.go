package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
)

// TestExpressPriorityDefault: the low-latency express lane is the
// default where the process may use it, falls back to 0 with one line
// where it may not, and an explicit setting (file or flag) is never
// second-guessed.
func TestExpressPriorityDefault(t *testing.T) {
	on, off, ten, thirty := true, false, 10, 30
	zero := 0
	none := func() []string { return nil }
	noNice := func() []string { return []string{"CAP_SYS_NICE"} }
	for _, tc := range []struct {
		name    string
		express *bool
		prio    *int
		flag    *int
		missing func() []string
		want    int
		logged  bool
	}{
		{"default with the capabilities", nil, nil, nil, none, config.DefaultExpressPriority, false},
		{"default without CAP_SYS_NICE", nil, nil, nil, noNice, 0, true},
		{"set in the file without CAP_SYS_NICE", nil, &thirty, nil, noNice, 30, false},
		{"0 in the file", nil, &zero, nil, noNice, 0, false},
		{"flag wins over the file", &on, &thirty, &ten, none, 10, false},
		{"flag 0 turns it off", nil, nil, &zero, none, 0, false},
		{"no express lane", &off, nil, nil, none, 0, false},
		{"no express lane, flag set", &off, nil, &ten, none, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			cfg := &config.Config{Express: tc.express, ExpressPriority: tc.prio}
			if got := expressPriority(cfg, tc.flag, tc.missing, log); got != tc.want {
				t.Errorf("priority %d, want %d", got, tc.want)
			}
			lines := strings.Count(buf.String(), "\n")
			if tc.logged != (lines == 1) || lines > 1 {
				t.Errorf("logged %d lines, want logged=%v:\n%s", lines, tc.logged, buf.String())
			}
			if tc.logged && !strings.Contains(buf.String(), "CAP_SYS_NICE") {
				t.Errorf("the line does not name the missing capability:\n%s", buf.String())
			}
		})
	}
}

func TestJoinNames(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"A"}, "A"},
		{[]string{"A", "B"}, "A and B"},
		{[]string{"A", "B", "C"}, "A, B and C"},
	} {
		if got := joinNames(tc.in); got != tc.want {
			t.Errorf("joinNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
