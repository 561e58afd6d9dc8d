package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// CNIVersion is the spec version of the conflist the agent writes.
const CNIVersion = "1.0.0"

// ForeignConfigs lists the CNI network configs in confDir that are not
// the agent's: the files a runtime loads (.conf, .conflist, .json), but
// not CNIConfName and not the agent's own temporary files. The runtime
// uses the first in name order, and the agent's sorts first, so another
// CNI's config beside it would be silently overridden, and its chained
// plugins' edits undone at every sync.
func ForeignConfigs(confDir string) ([]string, error) {
	entries, err := os.ReadDir(confDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || name == CNIConfName || strings.HasPrefix(name, ".") {
			continue
		}
		switch filepath.Ext(name) {
		case ".conf", ".conflist", ".json":
			out = append(out, name)
		}
	}
	return out, nil
}

// pluginVersions asks a CNI plugin which spec versions it supports (its
// VERSION command).
func pluginVersions(path string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	cmd.Stdin = strings.NewReader(`{"cniVersion":"` + CNIVersion + `"}`)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s VERSION: %w", path, err)
	}
	var v struct {
		Supported []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		return nil, fmt.Errorf("%s VERSION answered %q: %w", path, strings.TrimSpace(out.String()), err)
	}
	return v.Supported, nil
}

// pluginCheck remembers which plugin binaries were found to support
// CNIVersion, by path, size and modification time, so the periodic sync
// does not run them again. Run's goroutine only.
type pluginCheck struct {
	ok map[string]string // path -> size/mtime when it answered
}

// check runs the VERSION command of each plugin in binDir that changed
// since it last passed, and fails naming every plugin that does not
// support CNIVersion: the runtime would fail every pod's sandbox with it.
func (p *pluginCheck) check(binDir string, names []string) error {
	if p.ok == nil {
		p.ok = map[string]string{}
	}
	var bad []string
	for _, name := range names {
		path := filepath.Join(binDir, name)
		st, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("CNI plugin %s: %w", name, err)
		}
		stamp := fmt.Sprint(st.Size(), st.ModTime().UnixNano())
		if p.ok[path] == stamp {
			continue
		}
		vs, err := pluginVersions(path)
		if err != nil {
			return fmt.Errorf("CNI plugin %s: %w", name, err)
		}
		if !slices.Contains(vs, CNIVersion) {
			bad = append(bad, fmt.Sprintf("%s supports %s", path, strings.Join(vs, ", ")))
			continue
		}
		p.ok[path] = stamp
	}
	if len(bad) > 0 {
		return fmt.Errorf("CNI plugins too old for the config's cniVersion %s (%s): replace them with the image's (remove them and the agent installs its own)", CNIVersion, strings.Join(bad, "; "))
	}
	return nil
}
