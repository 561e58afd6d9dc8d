package kubenode

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/kubetest"
)

// TestRealAPIServer: against a real kube-apiserver and etcd, the source
// waits for its Node's site label (a Warning Event stored in the API),
// then follows the controller's published catalog to a model, and says so
// with a Normal Event.
func TestRealAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	client := env.Clientset(t)
	ctx, cancel := context.WithCancel(context.Background())
	var s *Source
	defer func() {
		cancel()
		if s != nil {
			s.Wait()
		}
		time.Sleep(100 * time.Millisecond) // the watcher and broadcaster see the end
	}()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: config.DefaultCatalogNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, node("a1", "", nil, "10.224.0.11"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer b.Shutdown()
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "bridgehead-node", Host: "a1"})
	var err error
	s, err = New(ctx, Options{Client: client, Node: "a1", Namespace: config.DefaultCatalogNamespace, Catalog: nodeConfig(t), ServiceCIDRs: serviceCIDRs, Recorder: rec, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent := func(reason string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second) // a failure bound
		for {
			s.Load()
			evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=a1,reason=" + reason})
			if err == nil && len(evs.Items) > 0 {
				t.Logf("event %s %s: %s", evs.Items[0].Type, evs.Items[0].Reason, evs.Items[0].Message)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no Event %s on Node a1 (%v)", reason, err)
			}
			select {
			case <-s.Changed():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	waitEvent(ReasonNotConfigured)

	// The controller labels the node and publishes the catalog.
	self, err := client.CoreV1().Nodes().Get(ctx, "a1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	self.Labels = map[string]string{SiteLabel: "a"}
	if _, err := client.CoreV1().Nodes().Update(ctx, self, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, cm := range published(t, nil) {
		if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	d := loadWhen(t, s)
	if d.PodCIDR.String() != "10.244.1.0/24" || d.Site != "a" {
		t.Errorf("model %s %v", d.Site, d.PodCIDR)
	}
	waitEvent(ReasonConfigured)
}
