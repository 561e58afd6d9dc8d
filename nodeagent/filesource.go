package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/filewatch"
)

// FileSource reads the node's model from a catalog file (the config
// `bridgehead routes` reads), for nodes without an API server, such as a
// flex host provisioned by cloud-init.
type FileSource struct {
	path, node string
	log        *slog.Logger
	changed    chan struct{}
	// skipped is the last Skipped summary logged (Load's goroutine).
	skipped string
}

// NewFileSource watches path until ctx ends. A watcher that cannot start
// is logged: the agent then reads the file at start only.
func NewFileSource(ctx context.Context, path, node string, log *slog.Logger) *FileSource {
	s := &FileSource{path: path, node: node, log: log, changed: make(chan struct{}, 1)}
	if _, err := filewatch.Start(ctx, path, filewatch.DefaultDebounce, s.changed, log); err != nil {
		log.Warn("catalog changes will not be noticed", "path", path, "err", err)
	}
	return s
}

// Load reads, parses and checks the catalog (CheckCatalog) and builds
// the node's model. Entries skipped are logged once per change.
func (s *FileSource) Load() (*Desired, error) {
	c, err := config.Load(s.path)
	if err != nil {
		return nil, err
	}
	c, skipped, err := CheckCatalog(c, s.node)
	if err != nil {
		return nil, err
	}
	if sum := Skipped(skipped); sum != s.skipped {
		s.skipped = sum
		if sum != "" {
			s.log.Warn("catalog entries skipped: they concern only other nodes or sites", "path", s.path, "count", len(skipped), "problems", LogSkipped(skipped))
		}
	}
	return FromConfig(c, s.node)
}

// CheckCatalog checks a catalog for the agent of node
// (config.CheckNode, without the private key: the node holds no gateway
// key). A problem with what the node installs (its own entry, its site,
// the other sites' CIDRs, the service CIDRs) refuses the catalog whole:
// the error names every such problem, and the agent keeps its model. A
// problem that concerns only another node or another site is skipped:
// c comes back without those node entries, and skipped lists them.
func CheckCatalog(c *config.Config, node string) (*config.Config, config.ErrorList, error) {
	kept, problems, skipped := config.CheckNode(c, node, config.CheckOptions{SkipPrivateKey: true})
	if len(problems) > 0 {
		return nil, skipped, problems
	}
	return kept, skipped, nil
}

// maxSkippedSummary bounds Skipped's text (a Node condition's message
// carries it).
const maxSkippedSummary = 300

// Skipped is a one-line summary of the problems CheckCatalog skipped,
// "" for none: their count and the first one.
func Skipped(skipped config.ErrorList) string {
	if len(skipped) == 0 {
		return ""
	}
	first := skipped[0]
	what := first.Msg
	if first.Field != "" {
		what = first.Field + ": " + first.Msg
	}
	what = strings.ReplaceAll(what, "\n", " ")
	s := fmt.Sprintf("%d catalog entries skipped (they concern only other nodes or sites), first %s", len(skipped), what)
	if len(skipped) == 1 {
		s = "1 catalog entry skipped (it concerns only another node or site): " + what
	}
	if len(s) > maxSkippedSummary {
		s = s[:maxSkippedSummary-3] + "..."
	}
	return s
}

// maxLoggedSkipped bounds the problems of LogSkipped.
const maxLoggedSkipped = 10

// LogSkipped is the skipped problems for a log line: the first
// maxLoggedSkipped, one a line.
func LogSkipped(skipped config.ErrorList) string {
	if len(skipped) <= maxLoggedSkipped {
		return skipped.Error()
	}
	return fmt.Sprintf("%v\n... and %d more", skipped[:maxLoggedSkipped], len(skipped)-maxLoggedSkipped)
}

// Changed signals after each burst of changes to the file.
func (s *FileSource) Changed() <-chan struct{} { return s.changed }
