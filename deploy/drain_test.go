package deploy

import (
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/bridgehead/bridgehead/config"
)

// drainMargin is what the stop timeouts leave above drain.timeout for
// the gateway's teardown (routes, TUN) before the SIGKILL.
const drainMargin = 5 * time.Second

// TestStopTimeoutsCoverDrain: systemd and Kubernetes give the gateway
// its default drain (config.DefaultDrainTimeout) and a teardown before
// they kill it, and stop it with SIGTERM (which drains); the node
// agent's DaemonSet rolls a bounded share of nodes at a time and keeps
// its state file on the host.
func TestStopTimeoutsCoverDrain(t *testing.T) {
	want := config.DefaultDrainTimeout + drainMargin
	u := parseUnit(t, unitPath)
	svc := u["Service"]
	if got := svc["KillSignal"]; len(got) != 1 || got[0] != "SIGTERM" {
		t.Errorf("%s: KillSignal %v, want SIGTERM (it drains)", unitPath, got)
	}
	if got := svc["TimeoutStopSec"]; len(got) != 1 {
		t.Errorf("%s: TimeoutStopSec %v", unitPath, got)
	} else if d, err := time.ParseDuration(got[0]); err != nil || d < want {
		t.Errorf("%s: TimeoutStopSec %s, want at least %s (drain.timeout %s + teardown)", unitPath, got[0], want, config.DefaultDrainTimeout)
	}

	gw := readDaemonSet(t, "kubernetes/gateway/daemonset.yaml")
	if g := gw.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < want {
		t.Errorf("gateway DaemonSet: terminationGracePeriodSeconds %v, want at least %s", g, want)
	}
	if ru := gw.Spec.UpdateStrategy.RollingUpdate; gw.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("gateway DaemonSet: update strategy %+v, want a rolling update of one gateway at a time", gw.Spec.UpdateStrategy)
	}
	if gw.Spec.MinReadySeconds < 10 {
		t.Errorf("gateway DaemonSet: minReadySeconds %d, want at least 10 (a load balancer's two probes)", gw.Spec.MinReadySeconds)
	}

	node := readDaemonSet(t, "kubernetes/node-daemonset.yaml")
	if ru := node.Spec.UpdateStrategy.RollingUpdate; node.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() == "100%" {
		t.Errorf("node DaemonSet: update strategy %+v, want a rolling update of a share of the nodes", node.Spec.UpdateStrategy)
	}
	args := strings.Join(node.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--state-file=/var/lib/bridgehead/") {
		t.Errorf("node DaemonSet: args %q keep no state file on the host's /var/lib/bridgehead", args)
	}
}

func readDaemonSet(t *testing.T, path string) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		if !strings.Contains(doc, "kind: DaemonSet") {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return &ds
	}
	t.Fatalf("%s: no DaemonSet", path)
	return nil
}
