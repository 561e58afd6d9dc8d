//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bridgehead/bridgehead/verify"
	"github.com/bridgehead/bridgehead/verify/kubereport"
)

// TestVerifyJob runs deploy/kubernetes/verify-job.yaml as an operator
// would (its image tag and --egress set for this cluster, nothing else):
// every check of every pod passes. Then one piece at a time is broken,
// and the check that covers it fails, and nothing that still works.
func TestVerifyJob(t *testing.T) {
	srv := inNamespace("inet", agnhostBinary(), "netexec", "--http-port=8081", "--udp-port=-1")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })

	recs := runVerify(t, "", "")
	for _, r := range recs {
		for _, c := range r.Checks {
			if c.Result != verify.Pass {
				t.Errorf("%s/%s: %s %s: %s %s %s", r.Site, r.Node, c.Name, c.Target, c.Result, c.Figure, c.Detail)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	for _, tc := range []struct {
		piece string
		// check is the check that must fail, from the sites listed.
		check string
		sites []string
		// also may fail as a consequence (a Service whose endpoints are
		// on the far side).
		also []string
		// unreported: a site whose pods cannot reach the API server, and
		// so cannot read the catalog or publish: their logs say so.
		unreported string
		// breakIt breaks the piece and returns how to repair it.
		breakIt func(t *testing.T) func()
	}{
		// Pod traffic only: the nodes (and so the kubelets and the Job)
		// keep working. The pods of site B cannot reach the API server
		// (the kubernetes Service) and say so; CoreDNS endpoints on the
		// far side fail too.
		{"site B's only gateway drops pod traffic", "pod", []string{"site-a"}, []string{"service", "dns"}, "site-b", func(t *testing.T) func() {
			return nftDrop(t, "gw-b1", "ip saddr { 10.244.0.0/16, 10.245.0.0/16 }")
		}},
		{"the outside server unreachable", "egress", []string{"site-a", "site-b"}, nil, "", func(t *testing.T) func() {
			return nftDrop(t, "inet", "tcp dport 8081")
		}},
		// Site A's own nodes are reached directly, not through the relay.
		{"the callback relay of site A", "callback", []string{"site-b"}, nil, "", func(t *testing.T) func() {
			return nftDrop(t, "gw-a1", "tcp dport 8131")
		}},
		{"CoreDNS scaled to zero", "dns", []string{"site-a", "site-b"}, nil, "", func(t *testing.T) func() {
			replicas := mustKC(t, "-n", "kube-system", "get", "deployment", "coredns", "-o", "jsonpath={.spec.replicas}")
			mustKC(t, "-n", "kube-system", "scale", "deployment", "coredns", "--replicas=0")
			eventually(t, "CoreDNS gone", 60*time.Second, func() error {
				if out := mustKC(t, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "name"); out != "" {
					return fmt.Errorf("still running: %s", out)
				}
				return nil
			})
			return func() {
				mustKC(t, "-n", "kube-system", "scale", "deployment", "coredns", "--replicas="+replicas)
				mustKC(t, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s")
			}
		}},
	} {
		t.Run(tc.piece, func(t *testing.T) {
			repair := tc.breakIt(t)
			recs := func() []verify.Record {
				defer repair()
				return runVerify(t, "30s", tc.unreported)
			}()
			failed := map[string]bool{}
			for _, r := range recs {
				for _, c := range r.Checks {
					if c.Result == verify.Fail && c.Name == tc.check {
						failed[r.Site] = true
					}
				}
			}
			for _, s := range tc.sites {
				if !failed[s] {
					t.Errorf("no %s check failed in %s", tc.check, s)
				}
			}
			for _, r := range recs {
				for _, c := range r.Checks {
					if c.Result == verify.Fail {
						t.Logf("%s/%s: %s %s: FAIL %s: %s", r.Site, r.Node, c.Name, c.Target, c.Figure, c.Detail)
						if c.Name != tc.check && !slices.Contains(tc.also, c.Name) {
							t.Errorf("%s/%s: %s failed too, though only %s was broken", r.Site, r.Node, c.Name, tc.piece)
						}
					}
				}
			}
		})
	}
}

// nftDrop drops matching input and forwarded packets in one of the
// lab's namespaces, and returns the repair.
func nftDrop(t *testing.T, ns, match string) func() {
	t.Helper()
	rules := fmt.Sprintf(`table inet bh-test {
  chain drop_in { type filter hook input priority -10; %s drop; }
  chain drop_fwd { type filter hook forward priority -10; %s drop; }
}
`, match, match)
	cmd := inNamespace(ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v\n%s", ns, err, out)
	}
	return func() {
		if out, err := inNamespace(ns, "nft", "delete", "table", "inet", "bh-test").CombinedOutput(); err != nil {
			t.Errorf("nft delete in %s: %v\n%s", ns, err, out)
		}
	}
}

// runVerify applies the verify Job (after the last run is gone), waits
// for it to end, and returns the reports its pods published. peerWait,
// when set, bounds how long a pod waits for peers it cannot reach.
func runVerify(t *testing.T, peerWait, unreported string) []verify.Record {
	t.Helper()
	ctx := context.Background()
	cs := client(t)
	const ns, name = "bridgehead-verify", "bridgehead-verify"
	mustKC(t, "-n", ns, "delete", "job", name, "--ignore-not-found", "--wait=true", "--cascade=foreground")
	if cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, cm := range cms.Items {
			if strings.HasPrefix(cm.Name, "verify-") {
				_ = cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{})
			}
		}
	}
	// The Job spreads its pods over the sites and nodes only among the
	// nodes that are Ready: a node a test before this one left NotReady
	// for a few seconds (TestAgentRestart, when the kubelet saw the CNI
	// config gone) would get no pod, and its report would be missing.
	eventually(t, "every node Ready before the verify Job", 90*time.Second, func() error {
		l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range l.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					return fmt.Errorf("%s Ready %s: %s", n.Name, c.Status, c.Message)
				}
			}
		}
		return nil
	})
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "verify-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	job := string(b)
	for old, new := range map[string]string{
		"image: ghcr.io/bridgehead/bridgehead\n": "image: ghcr.io/bridgehead/bridgehead:dev\n",
		"--egress=203.0.113.80:443":              "--egress=" + outside + ":8081",
	} {
		if !strings.Contains(job, old) {
			t.Fatalf("verify-job.yaml lacks %q", old)
		}
		job = strings.Replace(job, old, new, 1)
	}
	if peerWait != "" {
		job = strings.Replace(job, "            - --report\n", "            - --peer-wait="+peerWait+"\n            - --report\n", 1)
	}
	start := time.Now()
	if out, err := kcIn(t, job, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply verify-job.yaml: %v\n%s", err, out)
	}
	var j *batchv1.Job
	eventually(t, "the verify Job ends", 4*time.Minute, func() error {
		j, err = cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == "True" {
				return nil
			}
		}
		return fmt.Errorf("succeeded %d, failed %d, active %d", j.Status.Succeeded, j.Status.Failed, j.Status.Active)
	})
	t.Logf("verify Job: succeeded %d, failed %d in %s", j.Status.Succeeded, j.Status.Failed, time.Since(start).Round(time.Second))
	logs, _ := kc(t, "-n", ns, "logs", "-l", "app.kubernetes.io/component=verify", "--prefix", "--tail=-1")
	t.Logf("verify pods' logs:\n%s", logs)
	recs, problems, err := kubereport.Collect(ctx, cs, ns)
	if err != nil || len(problems) > 0 {
		t.Fatalf("reports: %v %v", problems, err)
	}
	var sites, nodes []string
	for _, r := range recs {
		sites = append(sites, r.Site)
		nodes = append(nodes, r.Node)
	}
	slices.Sort(sites)
	want := []string{"site-a", "site-a", "site-b", "site-b"}
	if unreported != "" {
		want = slices.DeleteFunc(want, func(s string) bool { return s == unreported })
		if n := strings.Count(logs, "cannot reach the API server"); n != 2 {
			t.Errorf("%d pods say they cannot reach the API server, want the 2 of %s", n, unreported)
		}
	}
	if !slices.Equal(sites, want) {
		t.Fatalf("reports from %v in %v: want %v", nodes, sites, want)
	}
	return recs
}

// kcIn runs kubectl with stdin.
func kcIn(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubecfg}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
