package container

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// craneBin is crane as `make crane` builds it; without it the test skips,
// except under CI, where `make test` builds it first.
func craneBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CRANE_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "bridgehead", "crane")
	}
	bin := filepath.Join(dir, "crane")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing (make crane)", bin)
		}
		t.Skipf("%s missing (make crane)", bin)
	}
	return bin
}

// TestPush runs deploy/container/push.sh (what `make push REGISTRY=...`
// runs after make container) against a registry that crane serves on
// 127.0.0.1: the archive's image lands under REGISTRY/bridgehead:TAG with
// the archive's manifest digest, the script prints kustomize images:
// lines that kubectl kustomize turns into REGISTRY/bridgehead@DIGEST in
// the manifests, and it refuses a missing REGISTRY and an archive whose
// .digest file disagrees. The archive is a small OCI layout written
// here: push.sh reads only index.json and copies the blobs, so the test
// needs no image build (a second or two in all).
func TestPush(t *testing.T) {
	crane := craneBin(t)
	dir := t.TempDir()
	archive := filepath.Join(dir, "bridgehead-oci.tar")
	dgst := writeLayout(t, archive, "v0.0.0-test")
	if err := os.WriteFile(archive+".digest", []byte(dgst+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The registry: crane registry serve, in memory, on a free port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, crane, "registry", "serve", "--address", addr)
	var srvLog bytes.Buffer
	srv.Stdout, srv.Stderr = &srvLog, &srvLog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = srv.Wait()
		if t.Failed() {
			t.Logf("crane registry serve:\n%s", srvLog.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("crane registry serve on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	push := func(args ...string) (string, string, error) {
		cmd := exec.Command("./push.sh", args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	registry := addr + "/team"
	start := time.Now()
	out, stderr, err := push("-c", crane, "-a", archive, "-r", registry)
	if err != nil {
		t.Fatalf("push.sh: %v\n%s", err, stderr)
	}
	t.Logf("push.sh in %v:\n%s%s", time.Since(start).Round(time.Millisecond), stderr, out)
	want := fmt.Sprintf("# %s/bridgehead:v0.0.0-test@%s\nimages:\n  - name: ghcr.io/bridgehead/bridgehead\n    newName: %s/bridgehead\n    digest: %s\n", registry, dgst, registry, dgst)
	if out != want {
		t.Errorf("stdout\n%s\nwant\n%s", out, want)
	}
	if got, err := exec.Command(crane, "digest", registry+"/bridgehead:v0.0.0-test").Output(); err != nil || strings.TrimSpace(string(got)) != dgst {
		t.Errorf("the registry's digest of the tag: %q %v, want %s", got, err, dgst)
	}

	// The lines pin the image in a kustomization.
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		k := filepath.Join(dir, "overlay")
		if err := os.MkdirAll(k, 0o755); err != nil {
			t.Fatal(err)
		}
		pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - {name: c, image: ghcr.io/bridgehead/bridgehead}\n"
		if err := os.WriteFile(filepath.Join(k, "pod.yaml"), []byte(pod), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(k, "kustomization.yaml"), []byte("resources: [pod.yaml]\n"+out), 0o644); err != nil {
			t.Fatal(err)
		}
		rendered, err := exec.Command(kubectl, "kustomize", k).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize: %v\n%s", err, rendered)
		}
		if img := registry + "/bridgehead@" + dgst; !strings.Contains(string(rendered), "image: "+img) {
			t.Errorf("kubectl kustomize with the printed lines:\n%s\nwant image %s", rendered, img)
		}
	} else if os.Getenv("CI") != "" {
		t.Fatalf("kubectl: %v", err)
	}

	// Refusals.
	if _, stderr, err := push("-c", crane, "-a", archive); exitCode(err) != 2 || !strings.Contains(stderr, "REGISTRY is required") {
		t.Errorf("no -r: %v %q, want exit 2", err, stderr)
	}
	if err := os.WriteFile(archive+".digest", []byte("sha256:"+strings.Repeat("0", 64)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := push("-c", crane, "-a", archive, "-r", registry); exitCode(err) != 1 || !strings.Contains(stderr, "rebuild") {
		t.Errorf("a stale .digest: %v %q, want exit 1", err, stderr)
	}

	// make push runs this script with crane, the archive and REGISTRY.
	if mk, err := exec.LookPath("make"); err == nil {
		n, err := exec.Command(mk, "-C", "../..", "-n", "push", "REGISTRY=r.example/x").Output()
		if err != nil {
			t.Fatalf("make -n push: %v", err)
		}
		if !strings.Contains(string(n), "deploy/container/push.sh -c ") || !strings.Contains(string(n), "/bridgehead-oci.tar -r r.example/x") {
			t.Errorf("make -n push REGISTRY=r.example/x:\n%s", n)
		}
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// writeLayout writes a one-layer OCI image layout as a tar at path,
// tagged tag in index.json as build.sh tags it, and returns the
// manifest's digest.
func writeLayout(t *testing.T, path, tag string) string {
	t.Helper()
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) map[string]any {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(b)}
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	body := []byte("bridgehead push test\n")
	if err := tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	tw.Close()
	diffID := sha256.Sum256(layer.Bytes())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(layer.Bytes())
	zw.Close()
	layerDesc := add(ocispec.MediaTypeImageLayerGzip, gz.Bytes())
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}}})
	cfgDesc := add(ocispec.MediaTypeImageConfig, cfg)
	mb, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": ocispec.MediaTypeImageManifest,
		"config": cfgDesc, "layers": []any{layerDesc}})
	mDesc := add(ocispec.MediaTypeImageManifest, mb)
	mDesc["annotations"] = map[string]string{ocispec.AnnotationRefName: tag}
	ib, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": ocispec.MediaTypeImageIndex, "manifests": []any{mDesc}})

	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := tar.NewWriter(f)
	file := func(name string, b []byte) {
		if err := out.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := out.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", ib)
	for d, b := range blobs {
		file("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), b)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return mDesc["digest"].(string)
}
