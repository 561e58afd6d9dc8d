package mdblock

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	md := "# t\n\n<!-- runs-in: TestX -->\n```sh\necho a\n```\n\ntext\n```yaml\nk: v\n```\n<!-- not-run: needs root -->\n\n~~~sh\nx\n~~~\n"
	got, err := Parse("r.md", []byte(md))
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{File: "r.md", Line: 4, Lang: "sh", Text: "echo a\n", Marker: "runs-in", Arg: "TestX"},
		{File: "r.md", Line: 9, Lang: "yaml", Text: "k: v\n"},
		{File: "r.md", Line: 14, Lang: "sh", Text: "x\n", Marker: "not-run", Arg: "needs root"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestParseUnclosed(t *testing.T) {
	if _, err := Parse("r.md", []byte("```sh\necho\n")); err == nil {
		t.Fatal("unclosed block accepted")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("<!-- runs-in: TestX -->\n```sh\necho a\n```\n")
	f.Add("```yaml\nk: v\n")
	f.Add("~~~\n```\n~~~\n<!--:-->\n```\n```\n")
	f.Fuzz(func(t *testing.T, md string) {
		blocks, err := Parse("f.md", []byte(md))
		if err != nil {
			return
		}
		lines := strings.Count(md, "\n") + 1
		// Lines are read as bufio.ScanLines reads them: a CR before
		// the LF is not part of the line.
		unix := strings.ReplaceAll(md, "\r\n", "\n")
		for _, b := range blocks {
			if b.Line < 1 || b.Line > lines || !strings.Contains(unix, b.Text) {
				t.Fatalf("block %+v out of the input", b)
			}
		}
	})
}
