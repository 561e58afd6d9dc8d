package docgen

import (
	"strings"
	"testing"
)

func TestCheckStates(t *testing.T) {
	known := map[string]bool{"up": true, "down": true, "draining": true, "no answer": true}
	tests := []struct {
		name, doc string
		problems  int
	}{
		{"known list", "Each gateway with its state (`up`, `draining`, `down (no answer)`).", 0},
		{"unknown state in a list", "Each gateway with its state (`up`, `stale`).", 1},
		{"unknown down reason", "Its state (`down (unplugged)`).", 1},
		{"bold after gateway is", "A site is reachable while one of its gateways is **up** or **draining**.", 0},
		{"unknown bold state later in the sentence", "A remote gateway is **up** when it answers, **stale** when it did earlier.", 1},
		{"bold words of the next sentence", "A gateway is **up**. It is **not** a state.", 0},
		{"unknown bold state in the list", "A gateway is **up** or **stale**.", 1},
		{"other parentheses", "the routing state whole (`daemon`, `config`).", 0},
		{"not about states", "the packages (`daemon`, `config`).", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckStates(Paragraphs("doc.md", []byte(tt.doc)), known)
			if len(got) != tt.problems {
				t.Errorf("problems %q, want %d", got, tt.problems)
			}
		})
	}
}

func TestCheckMetricMentions(t *testing.T) {
	ms := []Metric{
		{Name: "bridgehead_peer_up", Type: "gauge", Help: "1 while up.", Labels: []string{"site", "gateway"}},
		{Name: "bridgehead_relay_dial_duration_seconds", Type: "histogram", Help: "Dial time."},
	}
	tests := []struct {
		name, doc string
		problems  int
	}{
		{"known", "`bridgehead_peer_up{site=\"a\"} == 0`", 0},
		{"unknown name", "`bridgehead_peer_upp`", 1},
		{"unknown label", "`bridgehead_peer_up{reason=\"x\"}`", 1},
		{"histogram series", "`bridgehead_relay_dial_duration_seconds_bucket{le=\"0.1\"}`", 0},
		{"gauge has no bucket", "`bridgehead_peer_up_bucket`", 1},
		{"a family", "`bridgehead_relay_*`", 0},
		{"an unknown family", "`bridgehead_nothing_*`", 1},
		{"a file name", "bridgehead_1.4.0_amd64.deb", 0},
		{"help quoted right", "    # HELP bridgehead_peer_up 1 while up.", 0},
		{"help quoted wrong", "    # HELP bridgehead_peer_up 1 while it is up.", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CheckMetricMentions("doc.md", tt.doc, ms); len(got) != tt.problems {
				t.Errorf("problems %q, want %d", got, tt.problems)
			}
		})
	}
}

func TestCheckRestartLists(t *testing.T) {
	var fields []ConfigField
	for _, p := range []string{"site", "gateway", "listen", "cipher", "lanes", "express", "drain.timeout"} {
		fields = append(fields, ConfigField{Path: p})
	}
	restart := []string{"site", "gateway", "listen", "cipher", "lanes"}
	tests := []struct {
		name, doc       string
		found, problems int
	}{
		{"the same list", "A reload refuses, needing a restart: `site`, `gateway`, `listen`, `cipher` and `lanes`.", 1, 0},
		{"the list after the paragraph", "These need a restart:\n\n`site`, `gateway`, `listen`, `cipher`, `lanes`.", 1, 0},
		{"one missing", "Restart for `site`, `gateway`, `listen`, `cipher`, `express`.", 1, 1},
		{"one too many", "Restart for `site`, `gateway`, `listen`, `cipher`, `lanes`, `drain.timeout`.", 1, 1},
		{"no restart", "`site`, `gateway`, `listen`, `cipher`, `lanes`.", 0, 0},
		{"too short to be the list", "A restart applies `site` and `gateway`.", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			found, problems := CheckRestartLists(Paragraphs("doc.md", []byte(tt.doc)), fields, restart)
			if found != tt.found || len(problems) != tt.problems {
				t.Errorf("found %d with problems %q, want %d and %d", found, problems, tt.found, tt.problems)
			}
		})
	}
}

func TestParagraphs(t *testing.T) {
	doc := "one\ntwo\n\n```\ncode state (`x`)\n```\n\n    indented\n\nthree\n"
	var got []string
	for _, p := range Paragraphs("d.md", []byte(doc)) {
		got = append(got, p.Text)
	}
	if strings.Join(got, "|") != "one\ntwo|three" {
		t.Errorf("paragraphs %q", got)
	}
}

func TestAnchors(t *testing.T) {
	md := "# Title\n\n<a id=\"probeinterval\"></a>\n### `sites[].probeInterval`\n\n## Site\n\n## Site\n"
	got := Anchors(md)
	for _, want := range []string{"title", "probeinterval", "sitesprobeinterval", "site", "site-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["sites[].probeinterval"] {
		t.Error("punctuation kept in an anchor")
	}
}

func TestCheckReferenceLinks(t *testing.T) {
	root := writeTree(t, map[string]string{
		"docs/reference/config.md": "<a id=\"via\"></a>\n### `sites[].via`\n",
		"docs/ops.md":              "[a](reference/config.md#via) [b](reference/config.md#sitesvia) [c](reference/config.md#nope) [d](reference/gone.md#x) [e](other.md#y)",
	})
	problems, err := CheckReferenceLinks(root, []string{"docs/ops.md"})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 2 || !strings.Contains(problems[0], "#nope") || !strings.Contains(problems[1], "gone.md") {
		t.Errorf("problems %q, want #nope and gone.md", problems)
	}
}
