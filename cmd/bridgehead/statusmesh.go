package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/kube/meshstatus"
	"github.com/bridgehead/bridgehead/mesh"
)

// defaultMeshEndpoint is the packaged config's metrics.listen.
const defaultMeshEndpoint = "127.0.0.1:9641"

// meshOptions are status --mesh's flags.
type meshOptions struct {
	endpoints  []string // gateways' metrics addresses
	kubernetes bool     // read every Gateway's rows instead
	kubeconfig string
	output     string // table or json
	color, all bool
	timeout    time.Duration
}

// statusMesh prints the mesh: from every Gateway's published rows
// (--kubernetes, and the kubectl plugin), or merged from the /mesh.json
// of each gateway endpoint given (the local gateway's by default). It
// fails (exit 1, after printing) when a pair is down or a source could
// not be read, like status.
func statusMesh(stdout io.Writer, o meshOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var m mesh.Matrix
	if o.kubernetes {
		cfg, err := adminConfig(o.kubeconfig)
		if err != nil {
			return err
		}
		client, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		rows, srcs, err := meshstatus.List(ctx, client)
		if err != nil {
			return err
		}
		m = mesh.Merge(rows, srcs, time.Now(), 0)
	} else {
		eps := o.endpoints
		if len(eps) == 0 {
			eps = []string{defaultMeshEndpoint}
		}
		m = fetchMeshes(ctx, eps)
	}
	switch o.output {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(m); err != nil {
			return err
		}
	case "table", "":
		if err := mesh.WriteTable(stdout, m, mesh.TableOptions{Width: termWidth(stdout), Color: o.color || isTerminal(stdout), All: o.all}); err != nil {
			return err
		}
	default:
		return usageError{fmt.Errorf("-o %s: the output is table or json", o.output)}
	}
	for _, c := range m.Cells {
		if c.State.Red() {
			return errReported
		}
	}
	for _, s := range m.Sources {
		if s.Error != "" {
			return errReported
		}
	}
	return nil
}

// fetchMeshes reads each endpoint's /mesh.json and merges their rows,
// each endpoint's own first; an endpoint that fails is a source with
// its error.
func fetchMeshes(ctx context.Context, eps []string) mesh.Matrix {
	var rows []mesh.Row
	var srcs []mesh.Source
	for _, ep := range eps {
		u := meshURL(ep)
		m, err := fetchMesh(ctx, u)
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // the URL is the source's name already
		}
		if err != nil {
			srcs = append(srcs, mesh.Source{Name: u, Error: err.Error()})
			continue
		}
		n := 0
		for _, c := range m.Cells {
			rows = append(rows, c.Rows...)
			n += len(c.Rows)
		}
		srcs = append(srcs, mesh.Source{Name: u, Rows: n})
	}
	return mesh.Merge(rows, srcs, time.Now(), 0)
}

// meshURL is the /mesh.json URL of a gateway's metrics address
// ("10.0.0.4:9641", "http://gw-a1:9641", or a full URL).
func meshURL(ep string) string {
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		return ep
	}
	if u.Path == "" || u.Path == "/" || u.Path == "/mesh" {
		u.Path = "/mesh.json"
	}
	// Only the gateway's own rows: a gateway in Kubernetes mode would
	// add the whole cluster's, which --kubernetes reads directly.
	q := u.Query()
	q.Set("local", "1")
	u.RawQuery = q.Encode()
	return u.String()
}

func fetchMesh(ctx context.Context, u string) (mesh.Matrix, error) {
	var m mesh.Matrix
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return m, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return m, fmt.Errorf("HTTP %s (a gateway older than the mesh view has no /mesh.json)", res.Status)
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 64<<20)).Decode(&m); err != nil {
		return m, fmt.Errorf("reading the mesh: %w", err)
	}
	return m, nil
}

// isTerminal reports whether w is a terminal (colours go only there
// unless --color).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// termWidth is w's width in columns: the terminal's, else $COLUMNS,
// else 80.
func termWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}
