package netpol

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Pod is a pod as the informer's store keeps it and the compiler reads
// it: what StripPod keeps of a corev1.Pod. A corev1.Pod struct alone
// takes 1,240 bytes, empty; a Pod some 350, about 800 with its labels
// and addresses, and the store holds one for every pod of the cluster
// (BenchmarkStoreMemory).
type Pod struct {
	metav1.TypeMeta
	// ObjectMeta holds the name, namespace, UID, resourceVersion and
	// labels, nothing else.
	metav1.ObjectMeta
	NodeName    string
	HostNetwork bool
	Phase       corev1.PodPhase
	// IPs are status.podIPs (status.podIP when that is empty).
	IPs []string
	// Ports are the named ports of the pod's containers and init
	// containers (restartable sidecars serve too).
	Ports []corev1.ContainerPort
}

// DeepCopyObject makes Pod a runtime.Object, as a store wants.
func (p *Pod) DeepCopyObject() runtime.Object {
	q := *p
	q.ObjectMeta = metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, Labels: maps.Clone(p.Labels)}
	q.IPs = slices.Clone(p.IPs)
	q.Ports = slices.Clone(p.Ports)
	return &q
}

// FromPod is what StripPod keeps of p.
func FromPod(p *corev1.Pod) *Pod {
	out := &Pod{
		ObjectMeta:  metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, Labels: p.Labels},
		NodeName:    p.Spec.NodeName,
		HostNetwork: p.Spec.HostNetwork,
		Phase:       p.Status.Phase,
	}
	for _, ip := range p.Status.PodIPs {
		out.IPs = append(out.IPs, ip.IP)
	}
	if len(out.IPs) == 0 && p.Status.PodIP != "" {
		out.IPs = []string{p.Status.PodIP}
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for _, cp := range c.Ports {
				if cp.Name != "" {
					out.Ports = append(out.Ports, corev1.ContainerPort{Name: cp.Name, ContainerPort: cp.ContainerPort, Protocol: cp.Protocol})
				}
			}
		}
	}
	return out
}

// StripPod is the pod informer's transform: a *corev1.Pod becomes a
// *Pod; anything else (a tombstone) passes.
func StripPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return FromPod(p), nil
	}
	return obj, nil
}

// samePod reports whether two stored pods differ in nothing the
// compiler reads.
func samePod(a, b *Pod) bool {
	return maps.Equal(a.Labels, b.Labels) && a.NodeName == b.NodeName && a.HostNetwork == b.HostNetwork &&
		a.Phase == b.Phase && slices.Equal(a.IPs, b.IPs) && slices.Equal(a.Ports, b.Ports)
}
