package kubenode

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bridgehead/bridgehead/nodeagent"
)

// TestConditionSkipped: the summary of skipped catalog entries is a
// warning in the condition's message, which stays True; the network
// policy state still ends it, and a long message is cut before both.
func TestConditionSkipped(t *testing.T) {
	const sum = "1 catalog entry skipped (it concerns only another node or site): sites[0].nodes[1].podCIDR: bad"
	client := fake.NewClientset(node("a1", "a", nil))
	r := NewConditionReporter(client, "a1", slog.New(slog.DiscardHandler), nil)
	r.Report(nodeagent.Status{Configured: true, CNIWritten: true, Routes: 3})
	r.ReportSkipped(sum)
	r.ReportNetworkPolicy(NetworkPolicyEnforced)
	ctx := context.Background()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, "a1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "CNI config written; " + SkippedPrefix + sum + "; " + NetworkPolicyPrefix + NetworkPolicyEnforced
	if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Message != want || n.Status.Conditions[0].Reason != ConditionConfigured {
		t.Errorf("conditions %+v, want %s %q", n.Status.Conditions, ConditionConfigured, want)
	}
	r.ReportSkipped("")
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n, _ = client.CoreV1().Nodes().Get(ctx, "a1", metav1.GetOptions{})
	if got := n.Status.Conditions[0].Message; strings.Contains(got, SkippedPrefix) {
		t.Errorf("message %q after the skips ended", got)
	}

	long := strings.Repeat("x", 2*maxMessage)
	got := message(long, sum, NetworkPolicyOff)
	if len(got) > maxMessage || !strings.Contains(got, SkippedPrefix+sum) || !strings.HasSuffix(got, NetworkPolicyPrefix+NetworkPolicyOff) {
		t.Errorf("long message cut to %d bytes: ...%q", len(got), got[max(len(got)-200, 0):])
	}
}
