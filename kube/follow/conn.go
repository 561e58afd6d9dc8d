package follow

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Reasons of bridgehead_follow_watch_errors_total: a bounded set, so a
// new kind of error is "other", never a new series.
const (
	reasonRefused      = "connection-refused"
	reasonReset        = "connection-lost" // reset, EOF, a watch closed at once
	reasonTimeout      = "timeout"
	reasonUnauthorized = "unauthorized"
	reasonForbidden    = "forbidden"
	reasonExpired      = "expired" // 410: the informer relists; the server answered
	reasonThrottled    = "too-many-requests"
	reasonServer       = "server-error"
	reasonOther        = "other"
)

var allReasons = []string{reasonRefused, reasonReset, reasonTimeout, reasonUnauthorized, reasonForbidden,
	reasonExpired, reasonThrottled, reasonServer, reasonOther}

// errorReason classifies a list/watch error.
func errorReason(err error) string {
	switch {
	case utilnet.IsConnectionRefused(err):
		return reasonRefused
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return reasonExpired
	case apierrors.IsUnauthorized(err):
		return reasonUnauthorized
	case apierrors.IsForbidden(err):
		return reasonForbidden
	case apierrors.IsTooManyRequests(err):
		return reasonThrottled
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || utilnet.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded):
		return reasonTimeout
	case apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err):
		return reasonServer
	case utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errShortWatch):
		return reasonReset
	}
	return reasonOther
}

// errShortWatch stands for the reflector's "very short watch" error: the
// watch closed at once with nothing received (client-go returns an empty
// watch for a connection closed before the response).
var errShortWatch = errors.New("very short watch")

// minWatch is how long a watch must stay open, when it delivers nothing,
// to count as a connection: client-go's reflector calls a watch that
// closes sooner without events "very short" and an error.
const minWatch = time.Second

// conn tracks whether the follower's informers reach the API server.
//
// client-go's reflector retries a watch that fails with "connection
// refused" (or 429) inside its watch loop and never reports it to the
// informer's watch error handler (reflector.go, isWatchErrorRetriable),
// so the handler alone stays silent while the API server is down. conn
// therefore sits in the informers' ListerWatcher (listWatch): every
// list and watch request's outcome reaches it; the watch error handler
// (handlerError) adds what ends a watch stream (expired, a short watch).
//
// Each informer (source) is connected when its last request succeeded:
// a list, or a watch that stayed open minWatch or delivered an event.
// The follower is connected when every source is. Only a change of that
// is logged (never a retry): disconnected (the first error after being
// connected, or at start), and connected again.
//
// Methods are called from the reflectors' goroutines; mu guards all.
type conn struct {
	log   *slog.Logger
	clock clock.Clock
	m     *metrics

	mu        sync.Mutex
	sources   map[string]bool // by source: its last request succeeded
	connected bool
	logged    bool      // a disconnection was logged (so its end is)
	down      time.Time // when the follower last became disconnected
	errs      int       // errors since then
}

func newConn(log *slog.Logger, clk clock.Clock, m *metrics, sources ...string) *conn {
	c := &conn{log: log, clock: clk, m: m, sources: map[string]bool{}}
	for _, s := range sources {
		c.sources[s] = false
	}
	return c
}

// counted marks an error conn has already counted, so handlerError,
// which sees it again when it ends the reflector's ListAndWatch, does
// not count it twice. It unwraps, so client-go classifies it as before.
type counted struct{ err error }

func (e counted) Error() string { return e.err.Error() }
func (e counted) Unwrap() error { return e.err }

// failed records a failed request of source; err is returned marked.
func (c *conn) failed(ctx context.Context, source string, err error) error {
	if ctx.Err() != nil {
		return err // stopping: not the API server's doing
	}
	c.record(source, err)
	return counted{err}
}

// handlerError is the informers' watch error handler: the error that
// ended a reflector's ListAndWatch. A request's error is counted already.
func (c *conn) handlerError(ctx context.Context, source string, err error) {
	var done counted
	if ctx.Err() != nil || errors.As(err, &done) {
		return
	}
	if errors.Is(err, io.EOF) {
		return // the watch ended normally
	}
	if isShortWatch(err) {
		err = errShortWatch
	}
	c.record(source, err)
}

// isShortWatch reports the reflector's error for a watch that closed at
// once (its message is all client-go gives).
func isShortWatch(err error) bool {
	return strings.Contains(err.Error(), "very short watch")
}

func (c *conn) record(source string, err error) {
	reason := errorReason(err)
	c.m.watchErrors.WithLabelValues(reason).Inc()
	if reason == reasonExpired {
		return // the server answered; the informer relists
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources[source] = false
	c.errs++
	if !c.connected && c.logged {
		return // still disconnected: counted, not logged
	}
	// Connected until now, or the first failure since the start.
	c.connected, c.logged, c.down, c.errs = false, true, c.clock.Now(), 1
	c.m.connected.Set(0)
	c.log.Warn("catalog watch cannot reach the API server; the gateway keeps its catalog file and retries",
		"reason", reason, "err", err)
}

// ok records a successful request of source (and stamps the sync time).
func (c *conn) ok(source string) {
	now := c.clock.Now()
	c.m.lastSync.Set(float64(now.UnixNano()) / 1e9)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources[source] = true
	if c.connected {
		return
	}
	for _, up := range c.sources {
		if !up {
			return
		}
	}
	c.connected = true
	c.m.connected.Set(1)
	if c.logged {
		c.logged = false
		c.log.Info("catalog watch reaches the API server again", "after", now.Sub(c.down).Round(time.Millisecond), "errors", c.errs)
	}
}

// listWatch is source's ListerWatcher: the namespace's ConfigMaps with
// tweak applied, each request's outcome reported to c. A watch is
// proxied so its first event, or its staying open minWatch, counts as
// success (client-go hands back an empty watch, not an error, for a
// connection closed before the response).
func (c *conn) listWatch(client kubernetes.Interface, ns, source string, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	cms := client.CoreV1().ConfigMaps(ns)
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			l, err := cms.List(ctx, o)
			if err != nil {
				return nil, c.failed(ctx, source, err)
			}
			c.ok(source)
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			w, err := cms.Watch(ctx, o)
			if err != nil {
				return nil, c.failed(ctx, source, err)
			}
			return c.observe(source, w), nil
		},
	}, client)
}

// observe proxies w: each event, and the watch staying open minWatch,
// is a success of source. The proxy's goroutine ends when w's channel
// closes or the proxy is stopped (it then stops w).
func (c *conn) observe(source string, w watch.Interface) watch.Interface {
	out := make(chan watch.Event)
	pw := watch.NewProxyWatcher(out)
	go func() {
		defer close(out)
		defer w.Stop()
		t := c.clock.NewTimer(minWatch)
		defer t.Stop()
		in := w.ResultChan()
		for {
			select {
			case e, open := <-in:
				if !open {
					return
				}
				c.ok(source)
				select {
				case out <- e:
				case <-pw.StopChan():
					return
				}
			case <-t.C():
				c.ok(source)
			case <-pw.StopChan():
				return
			}
		}
	}()
	return pw
}

// newInformer is a ConfigMap informer over lw, indexed by namespace as
// the informer factory's are. Its cache holds the ConfigMaps without
// managedFields (stripManagedFields): the follower reads names, labels
// and data only.
func newInformer(lw cache.ListerWatcher) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = inf.SetTransform(stripManagedFields) // fails only once started
	return inf
}

// stripManagedFields is a ConfigMap without metadata.managedFields (a
// shallow copy: the decoded object is not modified); anything else
// passes unchanged.
func stripManagedFields(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.ManagedFields == nil {
		return obj, nil
	}
	cp := *cm
	cp.ManagedFields = nil
	return &cp, nil
}
