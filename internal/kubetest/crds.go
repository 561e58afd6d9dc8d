package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates (or replaces) every CustomResourceDefinition in the
// *.yaml files of dir and waits until each is Established.
func (e *Env) InstallCRDs(t testing.TB, dir string) {
	t.Helper()
	if err := e.installCRDs(context.Background(), dir, true); err != nil {
		t.Fatalf("kubetest: install CRDs from %s: %v", dir, err)
	}
}

// WaitCRDs waits until every CustomResourceDefinition in the *.yaml
// files of dir, created by someone else (kubectl apply), is Established.
func (e *Env) WaitCRDs(t testing.TB, dir string) {
	t.Helper()
	if err := e.installCRDs(context.Background(), dir, false); err != nil {
		t.Fatalf("kubetest: wait for the CRDs of %s: %v", dir, err)
	}
}

func (e *Env) installCRDs(ctx context.Context, dir string, create bool) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	if len(files) == 0 {
		return errors.New("no *.yaml files")
	}
	dc, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	crds := dc.Resource(crdGVR)
	var names []string
	for _, f := range files {
		objs, err := decodeObjects(f)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			names = append(names, o.GetName())
			if !create {
				continue
			}
			_, err := crds.Create(ctx, o, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				var cur *unstructured.Unstructured
				if cur, err = crds.Get(ctx, o.GetName(), metav1.GetOptions{}); err == nil {
					o.SetResourceVersion(cur.GetResourceVersion())
					_, err = crds.Update(ctx, o, metav1.UpdateOptions{})
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %s: %w", f, o.GetName(), err)
			}
		}
	}
	for _, n := range names {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cur, err := crds.Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("%s not established: %w", n, err)
		}
	}
	return nil
}

// decodeObjects reads the YAML documents of file as objects, skipping
// empty ones.
func decodeObjects(file string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(m) == 0 {
			continue
		}
		if k, _ := m["kind"].(string); strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%s: a document without kind", file)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}
