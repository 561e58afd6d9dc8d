// Package kubereport keeps verify's reports in the API server, one
// ConfigMap per site and node, so one matrix of site × check can be read
// for the whole cluster (verify --report publishes, verify --collect
// reads; verify.BuildMatrix renders).
//
// Why ConfigMaps in a namespace of their own (bridgehead-verify): a report
// is a few KiB of JSON that kubectl can show, needs no CRD, and the
// reporter's credential (create and update of ConfigMaps) then reaches
// nothing but reports — in bridgehead-system or kube-system the same
// verbs could rewrite the catalog ConfigMaps. The reporter can neither
// read, list nor delete them (it writes with an unconditional update);
// the operator's collector lists them by label.
package kubereport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/verify"
)

// DefaultNamespace holds the reports (deploy/kubernetes/verify-rbac.yaml).
const DefaultNamespace = "bridgehead-verify"

// Labels on a report's ConfigMap; ReportLabel selects them all.
const (
	ReportLabel = "bridgehead.io/verify-report"
	SiteLabel   = "bridgehead.io/site"
	NodeLabel   = "bridgehead.io/node"
)

// DataKey is the ConfigMap key holding the record's JSON.
const DataKey = "report.json"

var unsafeName = regexp.MustCompile(`[^a-z0-9-]+`)

// Name is the ConfigMap of site and node's report: verify-SITE-NODE in
// lower case, other characters as '-', and a hash of the two when that
// would be too long or ambiguous, so each pair has its own name.
func Name(site, node string) string {
	clean := func(s string) string { return strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(s), "-"), "-") }
	name := "verify-" + clean(site) + "-" + clean(node)
	if clean(site) == site && clean(node) == node && len(name) <= validation.DNS1123SubdomainMaxLength && !strings.Contains(site, "-") {
		return name
	}
	sum := sha256.Sum256([]byte(site + "\x00" + node))
	suffix := "-" + hex.EncodeToString(sum[:5])
	if max := validation.DNS1123SubdomainMaxLength - len(suffix); len(name) > max {
		name = strings.TrimRight(name[:max], "-")
	}
	return name + suffix
}

// Publish writes rec into namespace ns: create, or when it exists an
// unconditional update (no read: the reporter may not get ConfigMaps).
func Publish(ctx context.Context, client kubernetes.Interface, ns string, rec verify.Record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: Name(rec.Site, rec.Node), Namespace: ns, Labels: map[string]string{
			ReportLabel: "true", "app.kubernetes.io/part-of": "bridgehead"}},
		Data: map[string]string{DataKey: string(data)},
	}
	for k, v := range map[string]string{SiteLabel: rec.Site, NodeLabel: rec.Node} {
		if len(validation.IsValidLabelValue(v)) == 0 {
			cm.Labels[k] = v
		}
	}
	cms := client.CoreV1().ConfigMaps(ns)
	_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("publish the report as ConfigMap %s/%s: %w", ns, cm.Name, err)
	}
	return nil
}

// Collect reads every report in namespace ns. A ConfigMap that does not
// hold a valid record is left out and named in problems.
func Collect(ctx context.Context, client kubernetes.Interface, ns string) (recs []verify.Record, problems []error, err error) {
	list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: ReportLabel + "=true"})
	if err != nil {
		return nil, nil, fmt.Errorf("list the reports in namespace %s: %w", ns, err)
	}
	for _, cm := range list.Items {
		rec, perr := verify.ParseRecord([]byte(cm.Data[DataKey]))
		if perr != nil {
			problems = append(problems, fmt.Errorf("ConfigMap %s/%s key %s: %w", ns, cm.Name, DataKey, perr))
			continue
		}
		recs = append(recs, rec)
	}
	return recs, problems, nil
}
