package nodeagent

import (
	"context"
	"log/slog"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/filewatch"
)

// FileSource reads the node's model from a catalog file (the config
// `bridgehead routes` reads), for nodes without an API server, such as a
// flex host provisioned by cloud-init.
type FileSource struct {
	path, node string
	changed    chan struct{}
}

// NewFileSource watches path until ctx ends. A watcher that cannot start
// is logged: the agent then reads the file at start only.
func NewFileSource(ctx context.Context, path, node string, log *slog.Logger) *FileSource {
	s := &FileSource{path: path, node: node, changed: make(chan struct{}, 1)}
	if _, err := filewatch.Start(ctx, path, filewatch.DefaultDebounce, s.changed, log); err != nil {
		log.Warn("catalog changes will not be noticed", "path", path, "err", err)
	}
	return s
}

// Load reads, parses and checks the catalog (config.Check, without the
// private key) and builds the node's model.
func (s *FileSource) Load() (*Desired, error) {
	c, err := config.Load(s.path)
	if err != nil {
		return nil, err
	}
	// The node holds no gateway key: every other rule applies.
	if problems, _ := config.Check(c, config.CheckOptions{SkipPrivateKey: true}); len(problems) > 0 {
		return nil, problems
	}
	return FromConfig(c, s.node)
}

// Changed signals after each burst of changes to the file.
func (s *FileSource) Changed() <-chan struct{} { return s.changed }
