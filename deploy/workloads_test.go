package deploy

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/internal/mdblock"
)

// workload is the part of a DaemonSet or Job that these tests read.
type workload struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec struct {
		Parallelism *int32 `yaml:"parallelism"`
		Completions *int32 `yaml:"completions"`
		Template    struct {
			Spec struct {
				HostNetwork               bool   `yaml:"hostNetwork"`
				ServiceAccountName        string `yaml:"serviceAccountName"`
				TopologySpreadConstraints []struct {
					TopologyKey       string `yaml:"topologyKey"`
					WhenUnsatisfiable string `yaml:"whenUnsatisfiable"`
				} `yaml:"topologySpreadConstraints"`
				SecurityContext *struct {
					RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
					RunAsGroup   *int64 `yaml:"runAsGroup"`
					Sysctls      []struct {
						Name  string `yaml:"name"`
						Value string `yaml:"value"`
					} `yaml:"sysctls"`
				} `yaml:"securityContext"`
				Tolerations []struct {
					Operator string `yaml:"operator"`
				} `yaml:"tolerations"`
				NodeSelector map[string]string `yaml:"nodeSelector"`
				Containers   []struct {
					Image           string   `yaml:"image"`
					Args            []string `yaml:"args"`
					SecurityContext struct {
						RunAsUser    *int64 `yaml:"runAsUser"`
						Capabilities struct {
							Drop []string `yaml:"drop"`
							Add  []string `yaml:"add"`
						} `yaml:"capabilities"`
					} `yaml:"securityContext"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name     string `yaml:"name"`
					HostPath *struct {
						Path string `yaml:"path"`
					} `yaml:"hostPath"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func readWorkload(t *testing.T, path string) workload {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var w workload
	if err := yaml.Unmarshal(b, &w); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(w.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", path, len(w.Spec.Template.Spec.Containers))
	}
	return w
}

// commandFlags is the set of flags `bridgehead help CMD` lists.
func commandFlags(t *testing.T, bin, cmd string) map[string]bool {
	t.Helper()
	out, err := exec.Command(bin, "help", cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("bridgehead help %s: %v\n%s", cmd, err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	return flags
}

// TestKubernetesWorkloads checks the node DaemonSet and the verify Job
// against the code: every flag they pass exists on the command they run,
// the image is the one name the kustomizations pin (and `make
// container` writes), untagged and a resource of a kustomization that
// sets its tag (imagePinned), the node agent gets NET_ADMIN and nothing
// else, writes the host's CNI directories where the runtime reads them
// and installs the plugins from where the image has them, and verify
// gets NET_RAW only and runs in the site its args name.
func TestKubernetesWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "bridgehead")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bridgehead").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		file, kind, command, capability string
	}{
		{"kubernetes/node-daemonset.yaml", "DaemonSet", "node", "NET_ADMIN"},
		{"kubernetes/verify/job.yaml", "Job", "verify", ""},
	} {
		t.Run(tc.file, func(t *testing.T) {
			w := readWorkload(t, tc.file)
			pod := w.Spec.Template.Spec
			c := pod.Containers[0]
			if w.Kind != tc.kind {
				t.Errorf("kind %s, want %s", w.Kind, tc.kind)
			}
			if c.Image != bridgeheadImage {
				t.Errorf("image %q: want %s, untagged: the images: of the kustomization that applies it sets the tag or digest", c.Image, bridgeheadImage)
			}
			if err := imagePinned(tc.file); err != nil {
				t.Error(err)
			}
			if len(c.Args) == 0 || c.Args[0] != tc.command {
				t.Fatalf("args %q: want the %s command first", c.Args, tc.command)
			}
			known := commandFlags(t, bin, tc.command)
			args := map[string]string{}
			for _, a := range c.Args[1:] {
				name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !strings.HasPrefix(a, "--") || !known[name] {
					t.Errorf("arg %q: not a flag of bridgehead %s", a, tc.command)
				}
				args[name] = val
			}
			sc := c.SecurityContext
			var wantAdd []string
			if tc.capability != "" {
				wantAdd = []string{tc.capability}
			}
			if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) || !slices.Equal(sc.Capabilities.Add, wantAdd) {
				t.Errorf("capabilities drop %v add %v: want drop ALL, add %v only", sc.Capabilities.Drop, sc.Capabilities.Add, wantAdd)
			}
			if tc.capability != "" && (sc.RunAsUser == nil || *sc.RunAsUser != 0) {
				t.Errorf("runAsUser %v: the image's default user is 65532; this workload needs root", sc.RunAsUser)
			}
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.MountPath] = m.Name
			}
			hostPaths := map[string]string{}
			for _, v := range pod.Volumes {
				if v.HostPath != nil {
					hostPaths[v.Name] = v.HostPath.Path
				}
			}
			switch tc.command {
			case "node":
				// The catalog is followed into a host file, not mounted.
				if got := hostPaths[mounts[filepath.Dir(args["catalog-file"])]]; args["catalog-file"] == "" || got != "/var/lib/bridgehead" {
					t.Errorf("--catalog-file %q is in the host's %q, want /var/lib/bridgehead (it must outlive the pod)", args["catalog-file"], got)
				}
				if _, ok := args["config"]; ok {
					t.Errorf("--config %q: in Kubernetes mode the node follows the published catalog", args["config"])
				}
				if !pod.HostNetwork || len(pod.Tolerations) == 0 || pod.Tolerations[0].Operator != "Exists" {
					t.Errorf("hostNetwork %v, tolerations %v: the agent runs on the host network of every node, NotReady ones too", pod.HostNetwork, pod.Tolerations)
				}
				if args["cni-plugins-from"] != "/usr/lib/bridgehead/cni" {
					t.Errorf("--cni-plugins-from %q: the image has the plugins in /usr/lib/bridgehead/cni (deploy/container/build.sh)", args["cni-plugins-from"])
				}
				for flag, host := range map[string]string{"cni-conf-dir": "/etc/cni/net.d", "cni-bin-dir": "/opt/cni/bin"} {
					if got := hostPaths[mounts[args[flag]]]; got != host {
						t.Errorf("--%s %q is the host's %q, want %s", flag, args[flag], got, host)
					}
				}
				if _, ok := args["ipam-data-dir"]; ok {
					t.Errorf("--ipam-data-dir goes into the CNI config as a host path; the container's path would be wrong there")
				}
			case "verify":
				// Sites from the published catalog, peers from the API:
				// nothing per site, no file mounted.
				if _, ok := args["config"]; ok || args["catalog-namespace"] != "bridgehead-system" || len(c.VolumeMounts) != 0 {
					t.Errorf("--config %q, --catalog-namespace %q, mounts %v: want the sites from the catalog the controller publishes", args["config"], args["catalog-namespace"], c.VolumeMounts)
				}
				if args["on"] != "pod" || pod.HostNetwork || args["site"] != "" || len(pod.NodeSelector) != 0 {
					t.Errorf("--on %q, hostNetwork %v, --site %q, nodeSelector %v: one Job for every site, on the pod network", args["on"], pod.HostNetwork, args["site"], pod.NodeSelector)
				}
				if w.Spec.Parallelism == nil || w.Spec.Completions == nil || *w.Spec.Parallelism != *w.Spec.Completions || *w.Spec.Parallelism < 2 {
					t.Errorf("parallelism %v, completions %v: want equal, two per site (the peers wait for each other)", w.Spec.Parallelism, w.Spec.Completions)
				}
				if len(pod.TopologySpreadConstraints) == 0 || pod.TopologySpreadConstraints[0].TopologyKey != "bridgehead.io/site" ||
					pod.TopologySpreadConstraints[0].WhenUnsatisfiable != "DoNotSchedule" {
					t.Errorf("topologySpreadConstraints %v: want the pods spread over the sites first", pod.TopologySpreadConstraints)
				}
				if _, ok := args["report"]; !ok || pod.ServiceAccountName != "bridgehead-verify" || args["node-name"] != "$(NODE_NAME)" || w.Metadata.Namespace != "bridgehead-verify" {
					t.Errorf("--report %v, serviceAccountName %q, --node-name %q, namespace %q: want the run published with verify-rbac.yaml's account, named by its node",
						ok, pod.ServiceAccountName, args["node-name"], w.Metadata.Namespace)
				}
				// Restricted: not root; the echoes use a ping socket, which
				// the pod's own group must be allowed.
				psc := pod.SecurityContext
				if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsGroup == nil {
					t.Fatalf("pod securityContext %+v: want runAsNonRoot and a runAsGroup", psc)
				}
				ok := false
				for _, sy := range psc.Sysctls {
					var lo, hi int64
					if _, err := fmt.Sscanf(sy.Value, "%d %d", &lo, &hi); sy.Name == "net.ipv4.ping_group_range" && err == nil && lo <= *psc.RunAsGroup && *psc.RunAsGroup <= hi {
						ok = true
					}
				}
				if !ok {
					t.Errorf("sysctls %v: net.ipv4.ping_group_range must hold runAsGroup %d, or the echoes cannot be sent", psc.Sysctls, *psc.RunAsGroup)
				}
			}
		})
	}
}

// bridgeheadImage is the name every manifest gives the image, untagged.
const bridgeheadImage = "ghcr.io/bridgehead/bridgehead"

// kustomization is the part of a kustomization.yaml that imagePinned reads.
type kustomization struct {
	Resources []string `yaml:"resources"`
	Images    []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
		Digest  string `yaml:"digest"`
	} `yaml:"images"`
}

// imagePinned says why the manifest at path would run the image under
// another name than the base's, or untagged (which a runtime resolves to
// :latest): kubectl apply -f skips kustomize, so the manifest must be a
// resource of the kustomization.yaml in its own directory (kustomize
// loads no file outside the directory it builds, links resolved), and
// that kustomization must set the image to exactly what
// kubernetes/kustomization.yaml sets it to. A manifest that is in no
// kustomization, as the verify Job once was, fails.
func imagePinned(path string) error {
	k, err := readKustomization("kubernetes")
	if err != nil {
		return err
	}
	base := k.image(bridgeheadImage)
	if base == "" {
		return fmt.Errorf("kubernetes/kustomization.yaml: no images: entry gives %s a tag or digest", bridgeheadImage)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	dir, file := filepath.Split(real)
	if k, err = readKustomization(dir); err != nil {
		return fmt.Errorf("%s: nothing sets its image's tag, so kubectl apply -f would run :latest: %v", path, err)
	}
	if !slices.Contains(k.Resources, file) {
		return fmt.Errorf("%s: not a resource of %skustomization.yaml (resources %v), so nothing sets its image's tag (kubectl apply -f would run :latest)", path, dir, k.Resources)
	}
	if got := k.image(bridgeheadImage); got != base {
		return fmt.Errorf("%s: %skustomization.yaml sets the image to %q, kubernetes/kustomization.yaml to %q: one image for every manifest", path, dir, got, base)
	}
	return nil
}

func readKustomization(dir string) (kustomization, error) {
	var k kustomization
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return k, err
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return k, fmt.Errorf("%s: %v", filepath.Join(dir, "kustomization.yaml"), err)
	}
	return k, nil
}

// image is what the kustomization makes of image: "NAME:TAG",
// "NAME@DIGEST", or "" when it sets neither.
func (k kustomization) image(image string) string {
	for _, im := range k.Images {
		if im.Name != image {
			continue
		}
		name := image
		if im.NewName != "" {
			name = im.NewName
		}
		switch {
		case im.Digest != "":
			return name + "@" + im.Digest
		case im.NewTag != "":
			return name + ":" + im.NewTag
		}
	}
	return ""
}

// TestKubernetesImagePinned: every manifest under kubernetes/ that names
// the image (the base's, the gateway's, the verify Job, and any added
// later) gets the base's tag from the kustomization of its directory
// (imagePinned). The old path kubernetes/verify-job.yaml, a link the lab
// still reads, is checked as the file it links to.
func TestKubernetesImagePinned(t *testing.T) {
	var checked int
	err := filepath.WalkDir("kubernetes", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || d.Name() == "kustomization.yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !regexp.MustCompile(`(?m)^\s*(- )?image: *"?` + regexp.QuoteMeta(bridgeheadImage) + `\b`).Match(b) {
			return nil
		}
		checked++
		if err := imagePinned(path); err != nil {
			t.Error(err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 5 { // controller, node agent, gateway, the verify Job and its link
		t.Errorf("%d manifests name %s, want at least 5", checked, bridgeheadImage)
	}
}

// TestVerifyOverlay renders the verify overlay of
// docs/getting-started/aks.md step 9 with kubectl kustomize: the Job runs
// the image the overlay pins (the lines make push prints), and the
// patch's tests still find --egress and --callback-relay where it
// replaces them.
func TestVerifyOverlay(t *testing.T) {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("kubectl: %v", err)
		}
		t.Skipf("kubectl: %v", err)
	}
	blocks, err := mdblock.Read("../docs/getting-started/aks.md")
	if err != nil {
		t.Fatal(err)
	}
	const start = "cat > bridgehead-overlay/verify/kustomization.yaml <<EOF\n"
	overlay := ""
	for _, b := range blocks {
		if _, rest, ok := strings.Cut(b.Text, start); ok {
			overlay, _, _ = strings.Cut(rest, "\nEOF\n")
		}
	}
	if overlay == "" {
		t.Fatalf("aks.md: no block writes the verify overlay (%q)", start)
	}
	dir := t.TempDir()
	abs, err := filepath.Abs("kubernetes/verify")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	const digest = "sha256:0b6c2f6e5f0d4b389a575d1c2d6c1a010b6c2f6e5f0d4b389a575d1c2d6c1a01"
	for _, r := range [][2]string{{"$ACR", "myacr"}, {"../../deploy/kubernetes/verify", rel}, {"sha256:DIGEST_MAKE_PUSH_PRINTED", digest}} {
		if !strings.Contains(overlay, r[0]) {
			t.Fatalf("aks.md's verify overlay lacks %q:\n%s", r[0], overlay)
		}
		overlay = strings.ReplaceAll(overlay, r[0], r[1])
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize of aks.md's verify overlay: %v\n%s", err, out)
	}
	var w workload
	if err := yaml.Unmarshal(out, &w); err != nil {
		t.Fatal(err)
	}
	c := w.Spec.Template.Spec.Containers
	if w.Kind != "Job" || len(c) != 1 {
		t.Fatalf("rendered %s with %d containers:\n%s", w.Kind, len(c), out)
	}
	if want := "myacr.azurecr.io/bridgehead@" + digest; c[0].Image != want {
		t.Errorf("image %q, want %q: the overlay's images: must reach the Job", c[0].Image, want)
	}
	for _, a := range []string{"--egress=EGRESS_IP:443", "--callback-relay=SITE_A_GATEWAY_IP:8131"} {
		if !slices.Contains(c[0].Args, a) {
			t.Errorf("args %q lack %s", c[0].Args, a)
		}
	}
	if w.Spec.Parallelism == nil || *w.Spec.Parallelism != 4 || w.Spec.Completions == nil || *w.Spec.Completions != 4 {
		t.Errorf("parallelism %v, completions %v: want the overlay's 4", w.Spec.Parallelism, w.Spec.Completions)
	}
}
