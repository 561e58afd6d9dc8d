package netpol

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ns(name string, kv ...string) *corev1.Namespace {
	l := map[string]string{"kubernetes.io/metadata.name": name}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func mkPod(namespace, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func withIPs(p *corev1.Pod, ips ...string) *corev1.Pod {
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func withPort(p *corev1.Pod, name string, proto corev1.Protocol, port int32) *corev1.Pod {
	if len(p.Spec.Containers) == 0 {
		p.Spec.Containers = []corev1.Container{{Name: "c"}}
	}
	p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: name, Protocol: proto, ContainerPort: port})
	return p
}

func sel(kv ...string) *metav1.LabelSelector {
	l := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: l}
}

func policy(namespace, name string, podSel map[string]string, types []networkingv1.PolicyType,
	ingress []networkingv1.NetworkPolicyIngressRule, egress []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: podSel},
			PolicyTypes: types, Ingress: ingress, Egress: egress,
		},
	}
}

func policyNamedPort(name string) networkingv1.NetworkPolicyPort {
	p := intstr.FromString(name)
	return networkingv1.NetworkPolicyPort{Port: &p}
}

func numPort(proto corev1.Protocol, port, end int32) networkingv1.NetworkPolicyPort {
	p := intstr.FromInt32(port)
	np := networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &p}
	if end != 0 {
		np.EndPort = &end
	}
	return np
}

// slim is the pods as the informer's store keeps them.
func slim(ps ...*corev1.Pod) []*Pod {
	out := make([]*Pod, len(ps))
	for i, p := range ps {
		out[i] = FromPod(p)
	}
	return out
}
