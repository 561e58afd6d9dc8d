package follow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// Options are a Follower's dependencies.
type Options struct {
	// Client reads ConfigMaps in Namespace (get, list, watch). It must
	// not have a short overall timeout: watches are long requests.
	Client    kubernetes.Interface
	Namespace string
	// Site is the gateway's own site: only its node slices are watched.
	Site string
	// Gateway is the gateway's name in its site (config's gateway): the
	// site's published relay becomes its relay section, listening on
	// its address, once the catalog lists it.
	Gateway string
	// Path is the catalog file written.
	Path string
	// Validate checks a candidate catalog file's contents with the
	// gateway's config, as the reload path would (config.CheckWithCatalog);
	// a catalog it refuses is not written.
	Validate func(catalog []byte) error
	// Changed, if set, is called after each write (the daemon reloads at
	// once rather than after its file watch's debounce).
	Changed  func()
	Log      *slog.Logger
	Registry prometheus.Registerer
	// Clock times the incomplete grace and stamps writes.
	Clock clock.Clock
}

// State is what the follower last made of the published catalog.
type State string

// States of a Follower.
const (
	// StateWaiting: the informers have not synced yet (the API server
	// has not answered since start).
	StateWaiting State = "waiting"
	// StateCurrent: the file holds the published catalog.
	StateCurrent State = "current"
	// StateIncomplete: a publication is in progress or the base is
	// missing; the file keeps the last good catalog.
	StateIncomplete State = "incomplete"
	// StateMalformed: the ConfigMaps do not decode, or the base does not
	// list this gateway's site.
	StateMalformed State = "malformed"
	// StateRefused: the catalog decodes but fails the gateway's checks.
	StateRefused State = "refused"
	// StateWriteFailed: the file could not be written.
	StateWriteFailed State = "write-failed"
)

var allStates = []State{StateWaiting, StateCurrent, StateIncomplete, StateMalformed, StateRefused, StateWriteFailed}

// Follower writes the published catalog to the catalog file. Run's
// goroutine owns the evaluation state (last, state, msg); informer
// handlers only signal kick. Written may be read from any goroutine.
type Follower struct {
	o    Options
	log  *slog.Logger
	kick chan struct{}

	base, slices            cache.SharedIndexInformer
	baseLister, sliceLister listers.ConfigMapNamespaceLister
	// conn counts the informers' list/watch errors and says whether
	// they reach the API server (conn.go).
	conn *conn

	// written is closed once the file holds a catalog the follower
	// accepted (written now, or found there already).
	written     chan struct{}
	writtenOnce sync.Once

	// Run's goroutine only.
	last  []byte // the file's contents as last written or read
	state State
	msg   string
	// logged: the current state was logged as a problem (so its end is
	// logged too); grace fires incompleteGrace into an incomplete state.
	logged bool
	grace  <-chan time.Time

	m metrics
}

// incompleteGrace is how long a publication may stay incomplete before
// the follower says so: the base and the slices come through two
// watches, so a reader often sees a new base a moment before its slice.
const incompleteGrace = 10 * time.Second

// New makes a Follower; Run starts it.
func New(o Options) (*Follower, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("follow: no client")
	case o.Namespace == "" || o.Site == "" || o.Path == "":
		return nil, errors.New("follow: namespace, site and path are required")
	case o.Validate == nil:
		return nil, errors.New("follow: no validate function")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	f := &Follower{o: o, log: o.Log.With("namespace", o.Namespace, "catalog", o.Path),
		kick: make(chan struct{}, 1), written: make(chan struct{}), state: StateWaiting}
	if err := f.m.register(o.Registry); err != nil {
		return nil, err
	}
	f.m.state(StateWaiting)

	const baseSource, slicesSource = "base", "slices"
	f.conn = newConn(f.log, o.Clock, &f.m, baseSource, slicesSource)
	// The site's node slices and its index (its commit point).
	sel := fmt.Sprintf("%s in (%s,%s),%s", catalog.CatalogLabel, catalog.KindIndex, catalog.KindNodes,
		labels.Set{catalog.SiteLabel: o.Site}.String())
	f.base = newInformer(f.conn.listWatch(o.Client, o.Namespace, baseSource, func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", catalog.BaseName).String()
	}))
	f.slices = newInformer(f.conn.listWatch(o.Client, o.Namespace, slicesSource, func(lo *metav1.ListOptions) {
		lo.LabelSelector = sel
	}))
	f.baseLister = listers.NewConfigMapLister(f.base.GetIndexer()).ConfigMaps(o.Namespace)
	f.sliceLister = listers.NewConfigMapLister(f.slices.GetIndexer()).ConfigMaps(o.Namespace)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f.signal() },
		UpdateFunc: func(any, any) { f.signal() },
		DeleteFunc: func(any) { f.signal() },
	}
	for src, inf := range map[string]cache.SharedIndexInformer{baseSource: f.base, slicesSource: f.slices} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("follow: %w", err)
		}
		if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
			f.conn.handlerError(ctx, src, err)
		}); err != nil {
			return nil, fmt.Errorf("follow: %w", err)
		}
	}
	return f, nil
}

func (f *Follower) signal() {
	select {
	case f.kick <- struct{}{}:
	default: // an evaluation is already pending; it will see this change
	}
}

// Written is closed once the catalog file holds a catalog the follower
// accepted: one it wrote, or the same one it found there.
func (f *Follower) Written() <-chan struct{} { return f.written }

// Run follows the catalog until ctx ends, then stops the informers and
// returns. The existing file's contents count as written: an unchanged
// publication is not written again.
func (f *Follower) Run(ctx context.Context) {
	if data, err := os.ReadFile(f.o.Path); err == nil {
		f.last = data
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, inf := range []cache.SharedIndexInformer{f.base, f.slices} {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Go(func() {
		if cache.WaitForCacheSync(ctx.Done(), f.base.HasSynced, f.slices.HasSynced) {
			f.signal()
		}
	})
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
			if f.base.HasSynced() && f.slices.HasSynced() {
				f.evaluate()
			}
		case <-f.grace:
			f.grace = nil
			if f.state == StateIncomplete {
				f.logged = true
				f.log.Warn("catalog publication incomplete; keeping the catalog file", "for", incompleteGrace, "reason", f.msg)
			}
		}
	}
}

// evaluate assembles the informers' view and writes it when it is new
// and valid.
func (f *Follower) evaluate() {
	f.m.evaluations.Inc()
	base, err := f.baseLister.Get(catalog.BaseName)
	if apierrors.IsNotFound(err) {
		base, err = nil, nil
	}
	if err != nil {
		f.setState(StateMalformed, err.Error())
		return
	}
	list, err := f.sliceLister.List(labels.Everything())
	if err != nil {
		f.setState(StateMalformed, err.Error())
		return
	}
	slices := make(map[string]*corev1.ConfigMap, len(list))
	for _, cm := range list {
		slices[cm.Name] = cm
	}
	sites, err := catalog.Assemble(base, slices, f.o.Site)
	switch {
	case errors.Is(err, catalog.ErrIncomplete):
		f.setState(StateIncomplete, err.Error())
		return
	case err != nil:
		f.setState(StateMalformed, err.Error())
		return
	}
	rl, err := ownRelay(base, sites, f.o.Site, f.o.Gateway)
	if err != nil {
		f.setState(StateMalformed, err.Error())
		return
	}
	data, err := Render(sites, rl)
	if err != nil {
		f.setState(StateMalformed, err.Error())
		return
	}
	if bytes.Equal(data, f.last) {
		f.setState(StateCurrent, "")
		f.markWritten()
		return
	}
	if err := f.o.Validate(data); err != nil {
		f.setState(StateRefused, summary(err))
		return
	}
	if err := writeAtomic(f.o.Path, data); err != nil {
		f.setState(StateWriteFailed, err.Error())
		return
	}
	f.last = data
	f.m.writes.Inc()
	f.m.lastWrite.Set(float64(f.o.Clock.Now().UnixNano()) / 1e9)
	nodes := 0
	for _, s := range sites {
		nodes += len(s.Nodes)
	}
	relay := "off"
	if rl != nil {
		relay = rl.Listen
	}
	f.log.Info("catalog file written from the API server", "sites", len(sites), "nodes", nodes, "relay", relay, "bytes", len(data))
	f.setState(StateCurrent, "")
	f.markWritten()
	if f.o.Changed != nil {
		f.o.Changed()
	}
}

// ownRelay is gateway gw's relay section from site's relay in the base
// (catalog.RelaysKey): nil when the site publishes none, or when the
// catalog does not list gw yet (there is no address to listen on; the
// relay starts with the write that lists it).
func ownRelay(base *corev1.ConfigMap, sites []config.Site, site, gw string) (*config.Relay, error) {
	relays, err := catalog.DecodeRelays(base)
	if err != nil || relays[site] == nil {
		return nil, err
	}
	for _, s := range sites {
		if s.Name != site {
			continue
		}
		for _, g := range s.Gateways {
			if g.Name == gw && (g.Address.IsValid() || g.Address6.IsValid()) {
				return kube.RelayToConfig(relays[site], g), nil
			}
		}
	}
	return nil, nil
}

func (f *Follower) markWritten() { f.writtenOnce.Do(func() { close(f.written) }) }

// setState counts a refusal and logs a change of state (or of the reason
// within one), never the same thing twice in a row. An incomplete
// publication is logged only when it lasts incompleteGrace.
func (f *Follower) setState(s State, msg string) {
	if s != StateCurrent {
		f.m.refused.WithLabelValues(string(s)).Inc()
	}
	if s == f.state && msg == f.msg {
		return
	}
	prev, wasLogged := f.state, f.logged
	f.state, f.msg, f.logged = s, msg, false
	f.m.state(s)
	switch s {
	case StateCurrent:
		if wasLogged {
			f.log.Info("catalog file follows the API server again", "was", string(prev))
		}
		f.grace = nil
	case StateIncomplete:
		f.log.Debug("catalog publication incomplete", "reason", msg)
		if prev != StateIncomplete {
			f.grace = f.o.Clock.After(incompleteGrace)
		}
		f.logged = wasLogged && prev == StateIncomplete
	default:
		f.logged = true
		f.grace = nil
		f.log.Error("published catalog not taken; keeping the catalog file", "state", string(s), "err", msg)
	}
}

// maxLoggedProblems bounds the problems of a refused catalog in its log
// line; `bridgehead check` on the published data lists them all.
const maxLoggedProblems = 5

// summary is err with at most maxLoggedProblems of its problems.
func summary(err error) string {
	var l config.ErrorList
	if !errors.As(err, &l) || len(l) <= maxLoggedProblems {
		return err.Error()
	}
	return fmt.Sprintf("%v\n... and %d more problems", l[:maxLoggedProblems], len(l)-maxLoggedProblems)
}

// Header starts every catalog file the follower writes.
const Header = "# Written by bridgehead run (kubernetes.follow) from the catalog the controller\n" +
	"# publishes; each change replaces this file. The gateway starts from it while the\n" +
	"# API server is unreachable.\n"

// Render is the catalog file of sites and the gateway's relay (nil: no
// relay section): Header and the `relay:` and `sites:` YAML of a config
// file, which config reads back to the same sites and relay.
func Render(sites []config.Site, relay *config.Relay) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(Header)
	if err := kube.WriteCatalog(&b, &config.Config{Relay: relay, Sites: sites}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeAtomic replaces path with data: a temporary file in the same
// directory, synced, renamed over path, and the directory synced, so a
// crash leaves the old file or the new one, never a part.
func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
