package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube/follow"
)

// triggerFollow is the reload trigger of a catalog the follower wrote.
const triggerFollow = "catalog from the API server"

// startFollow starts following the published catalog when the config at
// path has kubernetes.follow (package kube/follow), before the config
// itself is loaded: a gateway without a catalog file yet waits here for
// the first one the API server gives it, and one that has the file
// starts from it at once, API server or not. Each write is signalled on
// changed. It returns the function that stops the follower and waits
// for it (a no-op without follow).
func startFollow(ctx context.Context, path string, over config.Overrides, reg prometheus.Registerer, changed chan<- struct{}, log *slog.Logger) (stop func(), err error) {
	head, err := config.LoadHeadWith(path, over)
	if err != nil || !head.Follows() {
		// Load reports a bad file in full.
		return func() {}, nil
	}
	rc, err := restConfig(head)
	if err != nil {
		return nil, err
	}
	// No overall timeout: the informers' watches are long requests.
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, credential(head), err)
	}
	catalog := head.CatalogPath()
	f, err := follow.New(follow.Options{
		Client: client, Namespace: head.Kubernetes.Namespace, Site: head.Site, Gateway: head.Gateway, Path: catalog,
		Validate: func(cat []byte) error {
			// The config as it is now, with the candidate catalog: the
			// checks the reload will make.
			data, err := config.ReadFile(path)
			if err != nil {
				return err
			}
			_, problems, _ := config.CheckWithCatalog(path, data, cat, config.CheckOptions{Overrides: over})
			return problems.Err()
		},
		Changed: func() {
			select {
			case changed <- struct{}{}:
			default: // a reload is already pending
			}
		},
		Log: log, Registry: reg, Clock: clock.RealClock{},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	stop = func() { cancel(); <-done }
	if _, err := os.Stat(catalog); errors.Is(err, fs.ErrNotExist) {
		log.Info("no catalog file yet: waiting for the catalog from the API server", "catalog", catalog, "namespace", head.Kubernetes.Namespace)
		select {
		case <-f.Written():
		case <-ctx.Done():
			stop()
			return nil, fmt.Errorf("%s: no catalog file %s, and none came from the API server before the stop", path, catalog)
		}
	}
	log.Info("following the catalog", "namespace", head.Kubernetes.Namespace, "site", head.Site, "catalog", catalog)
	return stop, nil
}
