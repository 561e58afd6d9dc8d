package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// resolveTimeout bounds the lookup of one gateway endpoint hostname.
const resolveTimeout = 5 * time.Second

// loader carries what Parse needs from the outside world, so tests can
// replace name resolution.
type loader struct {
	lookupHost func(ctx context.Context, host string) ([]string, error)
	// catalog, when not nil, is the followed catalog's contents, used
	// instead of reading its file (CheckWithCatalog).
	catalog []byte
	// head stops after decoding and defaults (LoadHead).
	head bool
	// gateway, when set, replaces the file's gateway (Overrides).
	gateway string
}

// Overrides replace fields of the config file as it is loaded, the same
// at start and at every reload: one file then serves every gateway of a
// DaemonSet (`bridgehead run --gateway=$(NODE_NAME)`).
type Overrides struct {
	// Gateway replaces the file's gateway (this gateway's name in its
	// site); the Gateway object's name defaults to <site>.<Gateway>.
	Gateway string
}

// LoadWith is Load with o applied.
func LoadWith(path string, o Overrides) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	l := defaultLoader()
	l.gateway = o.Gateway
	return l.parse(path, data)
}

func defaultLoader() loader {
	return loader{lookupHost: net.DefaultResolver.LookupHost}
}

// Load reads and parses the file at path. See Parse.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// LoadHead reads the config file at path alone: decoded, with defaults,
// but without its followed catalog (kubernetes.follow) and without the
// checks of Parse. `bridgehead run` reads the kubernetes section this way
// to fetch a catalog it does not have yet; everything else uses Load.
func LoadHead(path string) (*Config, error) {
	return LoadHeadWith(path, Overrides{})
}

// LoadHeadWith is LoadHead with o applied.
func LoadHeadWith(path string, o Overrides) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	l := defaultLoader()
	l.head, l.gateway = true, o.Gateway
	c, errs := l.parseAll(path, data)
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// FileError is a config file that cannot be read. Every command (check,
// routes, run, verify, a reload) reports it in the same words:
// "config file PATH does not exist" or "cannot read config file PATH: why".
type FileError struct {
	Path string
	Err  error // the reason, without the path: fs.ErrNotExist, EACCES, ...
}

func (e *FileError) Error() string {
	if errors.Is(e.Err, fs.ErrNotExist) {
		return "config file " + e.Path + " does not exist"
	}
	return "cannot read config file " + e.Path + ": " + e.Err.Error()
}

func (e *FileError) Unwrap() error { return e.Err }

// ReadFile reads the config file at path; an error is a *FileError.
func ReadFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &FileError{Path: path, Err: err}
	}
	return data, nil
}

// Parse decodes data, the contents of the file at path, applies defaults
// and checks what the daemon needs to run: references to the local site
// and gateway, cipher, listen address, CIDR syntax, gateway endpoints
// (hostnames are resolved now) and public keys, unique names, interface
// name and MTU. Any error is an ErrorList holding every problem found,
// each naming file, line and field. The full address-plan check is Check.
func Parse(path string, data []byte) (*Config, error) {
	return defaultLoader().parse(path, data)
}

func (l loader) parse(path string, data []byte) (*Config, error) {
	c, errs := l.parseAll(path, data)
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// startDecode reads data as one YAML document of the file at path: the
// Config it decodes into, the decoder holding its problems and lines,
// and the document's root (ok false: the YAML itself did not parse).
func startDecode(path string, data []byte) (*Config, *decoder, *yaml.Node, bool) {
	c := &Config{Path: path, hash: HashData(data)}
	d := &decoder{reporter{file: path, lines: map[string]int{}}}
	root, ok := d.document(data)
	if ok {
		d.lines[""] = root.Line
	}
	return c, d, root, ok
}

// parseAll decodes and validates like parse but also returns what decoded
// when there were problems (nil only if the YAML itself did not parse).
func (l loader) parseAll(path string, data []byte) (*Config, ErrorList) {
	c, d, root, ok := startDecode(path, data)
	if !ok {
		return nil, d.errs.sorted()
	}
	d.config(root, c)
	if l.gateway != "" {
		c.Gateway = l.gateway
	}
	c.lines = d.lines

	applyDefaults(c)
	if l.head {
		if len(d.errs) > 0 {
			return c, d.errs.sorted()
		}
		return c, nil
	}
	if cat := l.readCatalog(c, d); cat != nil {
		c.hash = hashSources(data, cat)
	}
	validateBasic(c, &d.reporter, l)
	if len(d.errs) > 0 {
		return c, d.errs.sorted()
	}
	return c, nil
}

// document parses data into the root node of its single YAML document.
func (d *decoder) document(data []byte) (*yaml.Node, bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorAt(1, "", "file is empty")
		} else {
			d.yamlError(err, data)
		}
		return nil, false
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.yamlError(err, data)
		return nil, false
	default:
		d.errorAt(extra.Line, "", "more than one YAML document in the file")
		return nil, false
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || isNull(deref(doc.Content[0])) {
		d.errorAt(max(doc.Line, 1), "", "file is empty")
		return nil, false
	}
	return doc.Content[0], true
}

// yamlError turns a yaml.v3 syntax error into an Error with its line.
// yaml.v3 reports parser errors ("did not find expected ...") and the tab
// error at the 0-based line of their context (the start of the enclosing
// block, often lines before the problem), and some errors without a line:
// both are corrected here.
func (d *decoder) yamlError(err error, data []byte) {
	full := err.Error()
	msg, line := strings.TrimPrefix(full, "yaml: "), 1
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				line, msg = n, text
				if strings.HasPrefix(text, "did not find expected") || strings.HasPrefix(text, "found a tab character") {
					line = problemLine(data, n, full)
				}
			}
		}
	} else if name, ok := strings.CutPrefix(msg, "unknown anchor '"); ok {
		name, _, _ = strings.Cut(name, "'")
		for i, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "*"+name) {
				line = i + 1
				break
			}
		}
	}
	d.errorAt(line, "", "invalid YAML: %s", msg)
}

// problemLine finds the line of a parser error that yaml.v3 reported at
// from, the line before (or of) its context: the first line, from there
// on, at which the file cut after that line fails with the same error. A
// valid file cut at a line end mostly stays valid, so that is where the
// problem starts. When no cut reproduces the error it returns from+1 (the
// context line), within the file.
func problemLine(data []byte, from int, full string) int {
	from = max(from, 1)
	lines := bytes.SplitAfter(data, []byte("\n"))
	if n := len(lines); n > 1 && len(lines[n-1]) == 0 {
		lines = lines[:n-1] // data ends in a newline
	}
	end := 0
	for i, l := range lines {
		end += len(l)
		if i+1 < from {
			continue
		}
		if i+1 > from+maxProblemScan {
			break
		}
		var n yaml.Node
		err := yaml.Unmarshal(data[:end], &n)
		if err != nil && sameYAMLError(err.Error(), full) {
			return i + 1
		}
	}
	return max(min(from+1, len(lines)), 1)
}

// maxProblemScan bounds the re-parses of problemLine (each is of the whole
// file so far), so a huge malformed file costs no more than a few hundred.
const maxProblemScan = 200

// sameYAMLError compares two yaml.v3 errors without their line numbers.
func sameYAMLError(a, b string) bool {
	strip := func(s string) string {
		s = strings.TrimPrefix(s, "yaml: ")
		if rest, ok := strings.CutPrefix(s, "line "); ok {
			if _, text, ok := strings.Cut(rest, ": "); ok {
				return text
			}
		}
		return s
	}
	return strip(a) == strip(b)
}

// applyDefaults fills in fields the file left out.
func applyDefaults(c *Config) {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Cipher == "" {
		c.Cipher = DefaultCipher
	}
	if c.Interface.Name == "" {
		c.Interface.Name = DefaultInterfaceName
	}
	if c.Interface.MTU == (MTU{}) {
		c.Interface.MTU = MTU{Value: DefaultMTU, Default: true}
	}
	if c.Cluster.Name == "" {
		c.Cluster.Name = DefaultClusterName
	}
	relayDefaults(c.Relay)
	kubernetesDefaults(c)
}

// HashData is what Hash returns for a Config parsed from data: the first
// 12 hex digits of its SHA-256. Comparing it before parsing lets a reload
// skip an unchanged file at the cost of one hash.
func HashData(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:12]
}

// Hash identifies the file contents: the first 12 hex digits of their
// SHA-256. It is empty for a Config not made by Parse.
func (c *Config) Hash() string {
	return c.hash
}

// SiteByName returns the site called name, or nil.
func (c *Config) SiteByName(name string) *Site {
	for i := range c.Sites {
		if c.Sites[i].Name == name {
			return &c.Sites[i]
		}
	}
	return nil
}

// LocalSite returns the site this gateway belongs to (Config.Site).
func (c *Config) LocalSite() *Site {
	return c.SiteByName(c.Site)
}

// LocalGateway returns this gateway (Config.Gateway of the local site).
func (c *Config) LocalGateway() *Gateway {
	s := c.LocalSite()
	if s == nil {
		return nil
	}
	return s.GatewayByName(c.Gateway)
}

// GatewayByName returns the gateway of s called name, or nil.
func (s *Site) GatewayByName(name string) *Gateway {
	for i := range s.Gateways {
		if s.Gateways[i].Name == name {
			return &s.Gateways[i]
		}
	}
	return nil
}

// EarlyDropEnabled reports whether the kernel early-drop filter should be
// attached (the default).
func (c *Config) EarlyDropEnabled() bool {
	return c.EarlyDrop == nil || *c.EarlyDrop
}

// ExpressEnabled reports whether the gateway runs the express lane (the
// default).
func (c *Config) ExpressEnabled() bool {
	return c.Express == nil || *c.Express
}

// DefaultExpressPriority is the express lane's SCHED_FIFO priority when
// the config does not set one: 10, low among real-time priorities (the
// kernel's own threads that need one run at 50) and above every ordinary
// thread. With it the kernel steers sparse flows to the express lane (a
// TUN steering program, CAP_BPF) and its loops run on real-time threads
// (CAP_SYS_NICE), so that a ping, a DNS query or an API call crosses in
// well under a millisecond while bulk flows keep every core busy
// (bench/README.md, "The express lane"); since the loops keep their P
// (router.Options.ExpressKeepsP) it costs bulk flows no throughput on the
// 2-core lab. The systemd unit, the deb, the image and the gateway
// DaemonSet grant both capabilities. A gateway that lacks either and
// leaves expressPriority unset runs the express lane without them and
// says so once at start (daemon.Run); one that sets it explicitly gets
// the warning of each step that fails.
const DefaultExpressPriority = 10

// ExpressPriorityOrDefault is the express lane's SCHED_FIFO priority (0:
// none). Without the express lane it is 0. ExpressPrioritySet tells the
// default from a value written in the file.
func (c *Config) ExpressPriorityOrDefault() int {
	switch {
	case !c.ExpressEnabled():
		return 0
	case c.ExpressPriority == nil:
		return DefaultExpressPriority
	}
	return *c.ExpressPriority
}

// ExpressPrioritySet reports whether the config file sets expressPriority.
func (c *Config) ExpressPrioritySet() bool { return c.ExpressPriority != nil }

// ClampMSSEnabled reports whether TCP MSS clamping is on (the default).
func (c *Config) ClampMSSEnabled() bool {
	return c.ClampMSS == nil || *c.ClampMSS
}

// PrivateKeyPath is PrivateKeyFile with a relative path taken relative to
// the directory of the config file. Empty when PrivateKeyFile is.
func (c *Config) PrivateKeyPath() string {
	p := c.PrivateKeyFile
	if p == "" || filepath.IsAbs(p) || c.Path == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.Path), p)
}

// Line returns the line of the value at a field path such as
// "sites[1].podCIDRs[0]", or of its closest enclosing value when the
// field is absent; 0 for a Config not made by Parse.
func (c *Config) Line(field string) int {
	return lineOf(c.lines, field)
}

// String returns "auto" or the number.
func (m MTU) String() string {
	if m.Auto {
		return "auto"
	}
	return strconv.Itoa(m.Value)
}
