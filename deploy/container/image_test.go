package container

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// cniPlugins are the reference plugins the image ships.
var cniPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

// nonRoot is the image's default user, the controller's.
const nonRoot = 65532

// tools returns umoci and the CNI plugins' directory as the Makefile
// builds them (make umoci cni-plugins). Without them the test skips,
// except under CI, where `make test` builds them first.
func tools(t *testing.T) (umoci, cniDir string) {
	t.Helper()
	home, _ := os.UserHomeDir()
	dir := func(env, def string) string {
		if v := os.Getenv(env); v != "" {
			return v
		}
		return filepath.Join(home, ".cache", "bridgehead", def)
	}
	umoci = filepath.Join(dir("UMOCI_DIR", "umoci"), "umoci")
	cniDir = dir("CNI_PLUGINS_DIR", "cni-plugins")
	var missing []string
	if _, err := os.Stat(umoci); err != nil {
		missing = append(missing, umoci+" (make umoci)")
	}
	if _, err := os.Stat(filepath.Join(cniDir, "bridge")); err != nil {
		missing = append(missing, cniDir+" (make cni-plugins)")
	}
	if len(missing) > 0 {
		msg := "missing " + strings.Join(missing, ", ")
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return umoci, cniDir
}

// build runs build.sh into a new directory and returns the archive, the
// digest file's and the ref file's contents, and how long it took.
func build(t *testing.T, umoci, cniDir string) (archive, digest, ref string, took time.Duration) {
	t.Helper()
	out := t.TempDir()
	start := time.Now()
	cmd := exec.Command("./build.sh", "-u", umoci, "-c", cniDir, "-o", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	took = time.Since(start)
	if err != nil {
		t.Fatalf("build.sh: %v\n%s", err, stderr.String())
	}
	archive = strings.TrimSpace(string(b))
	if want := filepath.Join(out, "bridgehead-oci.tar"); archive != want {
		t.Fatalf("build.sh printed %q, want %q", archive, want)
	}
	d, err := os.ReadFile(archive + ".digest")
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.ReadFile(archive + ".ref")
	if err != nil {
		t.Fatal(err)
	}
	return archive, strings.TrimSpace(string(d)), strings.TrimSpace(string(r)), took
}

// TestImage builds the image twice, checks that both builds are the same
// to the byte, then reads the archive as a registry or runtime would:
// index, manifest, config, layers, every blob against its digest. It runs
// the binary from the layer (as the image's user when root) and the CNI
// plugins, and unpacks the image with umoci into a runtime bundle.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image; skipped with -short")
	}
	umoci, cniDir := tools(t)
	archive, digest, ref, took := build(t, umoci, cniDir)
	archive2, digest2, _, took2 := build(t, umoci, cniDir)
	fi, err := os.Stat(archive)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("archive %d bytes, %s; built in %s, again in %s", fi.Size(), ref, took.Round(time.Millisecond), took2.Round(time.Millisecond))
	if digest != digest2 {
		t.Errorf("two builds of one commit: digests %s and %s", digest, digest2)
	}
	if h1, h2 := fileSHA(t, archive), fileSHA(t, archive2); h1 != h2 {
		t.Errorf("two builds of one commit: archives %s and %s differ", h1, h2)
	}
	if !strings.HasSuffix(ref, "@"+digest) || !strings.HasPrefix(ref, "bridgehead:") {
		t.Errorf("ref %q: want bridgehead:TAG@%s", ref, digest)
	}
	tag := strings.TrimSuffix(strings.TrimPrefix(ref, "bridgehead:"), "@"+digest)
	epoch := sourceDateEpoch(t)

	files := readTar(t, archive)
	for name, f := range files {
		if f.hdr.Uid != 0 || f.hdr.Gid != 0 || !f.hdr.ModTime.Equal(epoch) {
			t.Errorf("archive entry %s: owner %d:%d, mtime %s; want 0:0, %s", name, f.hdr.Uid, f.hdr.Gid, f.hdr.ModTime.UTC(), epoch)
		}
		if d, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && d != "" && fileDigest(f.data) != d {
			t.Errorf("blob %s has digest %s", name, fileDigest(f.data))
		}
	}
	if got := string(files["oci-layout"].data); !strings.Contains(got, `"imageLayoutVersion":"1.0.0"`) {
		t.Errorf("oci-layout: %q", got)
	}
	var index ocispec.Index
	unmarshal(t, files, "index.json", &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json: %d manifests, want 1", len(index.Manifests))
	}
	md := index.Manifests[0]
	if md.Digest.String() != digest || md.Annotations[ocispec.AnnotationRefName] != tag {
		t.Errorf("index.json: manifest %s tagged %q; the .digest file says %s, the .ref file tag %q",
			md.Digest, md.Annotations[ocispec.AnnotationRefName], digest, tag)
	}
	var manifest ocispec.Manifest
	unmarshal(t, files, blob(md.Digest.String()), &manifest)
	var config ocispec.Image
	unmarshal(t, files, blob(manifest.Config.Digest.String()), &config)

	c := config.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/bin/bridgehead"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q: want [/usr/bin/bridgehead] and no cmd", c.Entrypoint, c.Cmd)
	}
	if c.User != fmt.Sprintf("%d:%d", nonRoot, nonRoot) {
		t.Errorf("user %q: want the non-root %d:%d", c.User, nonRoot, nonRoot)
	}
	if config.OS != "linux" || config.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s", config.OS, config.Architecture)
	}
	if config.Created == nil || !config.Created.Equal(epoch) {
		t.Errorf("created %v: want SOURCE_DATE_EPOCH %s", config.Created, epoch)
	}
	if c.Labels[ocispec.AnnotationVersion] == "" || c.Labels[ocispec.AnnotationRevision] == "" {
		t.Errorf("labels %v: want version and revision", c.Labels)
	}

	// Two layers, CNI plugins then the binary, and nothing else.
	want := [][]string{
		{"usr/", "usr/lib/", "usr/lib/bridgehead/", "usr/lib/bridgehead/cni/",
			"usr/lib/bridgehead/cni/bridge", "usr/lib/bridgehead/cni/host-local",
			"usr/lib/bridgehead/cni/loopback", "usr/lib/bridgehead/cni/portmap"},
		{"usr/", "usr/bin/", "usr/bin/bridgehead"},
	}
	if len(manifest.Layers) != len(want) || len(config.RootFS.DiffIDs) != len(want) {
		t.Fatalf("%d layers, %d diff_ids: want %d", len(manifest.Layers), len(config.RootFS.DiffIDs), len(want))
	}
	// The image's user must reach the binary: open up the test's
	// directories (0700 from t.TempDir) on the way.
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range manifest.Layers {
		if l.MediaType != ocispec.MediaTypeImageLayerGzip {
			t.Errorf("layer %d: media type %s", i, l.MediaType)
		}
		raw := gunzip(t, files[blob(l.Digest.String())].data)
		if fileDigest(raw) != strings.TrimPrefix(config.RootFS.DiffIDs[i].String(), "sha256:") {
			t.Errorf("layer %d: uncompressed digest is not diff_id %s", i, config.RootFS.DiffIDs[i])
		}
		names := extract(t, raw, root, epoch)
		if !slices.Equal(names, want[i]) {
			t.Errorf("layer %d holds %q, want %q", i, names, want[i])
		}
	}

	// The binary and the plugins are static and run.
	bin := filepath.Join(root, "usr/bin/bridgehead")
	static(t, bin)
	cmd := exec.Command(bin, "version")
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nonRoot, Gid: nonRoot}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), c.Labels[ocispec.AnnotationVersion]) {
		t.Errorf("bridgehead version (uid %d): %v: %q, want %s", nonRoot, err, out, c.Labels[ocispec.AnnotationVersion])
	}
	for _, p := range cniPlugins {
		path := filepath.Join(root, "usr/lib/bridgehead/cni", p)
		static(t, path)
		cmd := exec.Command(path)
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), `"supportedVersions"`) {
			t.Errorf("CNI plugin %s VERSION: %v: %q", p, err, out)
		}
	}

	unpack(t, umoci, files, tag)
}

// unpack lets umoci, as a runtime's image tool would, turn the archive
// into an OCI runtime bundle, and checks the process it would start.
func unpack(t *testing.T, umoci string, files map[string]entry, tag string) {
	t.Helper()
	layout := t.TempDir()
	for name, f := range files {
		p := filepath.Join(layout, name)
		if f.hdr.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bundle := filepath.Join(t.TempDir(), "bundle")
	args := []string{"unpack", "--image", layout + ":" + tag, bundle}
	if os.Geteuid() != 0 {
		args = slices.Insert(args, 1, "--rootless")
	}
	if out, err := exec.Command(umoci, args...).CombinedOutput(); err != nil {
		t.Fatalf("umoci %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var spec struct {
		Process struct {
			Args []string `json:"args"`
			User struct {
				UID uint32 `json:"uid"`
				GID uint32 `json:"gid"`
			} `json:"user"`
		} `json:"process"`
	}
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(spec.Process.Args, []string{"/usr/bin/bridgehead"}) || spec.Process.User.UID != nonRoot || spec.Process.User.GID != nonRoot {
		t.Errorf("umoci unpack: process %+v", spec.Process)
	}
	if _, err := os.Stat(filepath.Join(bundle, "rootfs/usr/lib/bridgehead/cni/bridge")); err != nil {
		t.Errorf("umoci unpack: %v", err)
	}
}

// sourceDateEpoch is what build.sh uses: $SOURCE_DATE_EPOCH, or the
// commit time of HEAD.
func sourceDateEpoch(t *testing.T) time.Time {
	t.Helper()
	out := []byte(os.Getenv("SOURCE_DATE_EPOCH"))
	if len(out) == 0 {
		var err error
		if out, err = exec.Command("git", "log", "-1", "--format=%ct").Output(); err != nil {
			t.Fatalf("git log: %v", err)
		}
	}
	var sec int64
	if _, err := fmt.Sscan(string(out), &sec); err != nil {
		t.Fatalf("git log: %q", out)
	}
	return time.Unix(sec, 0).UTC()
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, path string) map[string]entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]entry{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = entry{h, b}
	}
}

// extract writes a layer's files under root and returns its entry names
// in order; every entry must be root's with the fixed mtime.
func extract(t *testing.T, layer []byte, root string, epoch time.Time) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(epoch) || h.Mode&0o777 != 0o755 {
			t.Errorf("layer entry %s: owner %d:%d, mode %o, mtime %s; want 0:0, 755, %s", h.Name, h.Uid, h.Gid, h.Mode, h.ModTime.UTC(), epoch)
		}
		p := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o755); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("layer entry %s: type %c", h.Name, h.Typeflag)
		}
	}
}

// static fails unless path is an ELF executable with no interpreter.
func static(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", path)
		}
	}
}

func unmarshal(t *testing.T, files map[string]entry, name string, v any) {
	t.Helper()
	f, ok := files[name]
	if !ok {
		t.Fatalf("archive has no %s", name)
	}
	if err := json.Unmarshal(f.data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func blob(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fileDigest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileDigest(b)
}
