package controller

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bridgehead/bridgehead/internal/kubetest"
)

// kubeletNode is Node i as a kubelet of an AKS node pool registers it:
// about 20 labels, the annotations of kubelet, CSI and the node
// controller, capacity, five kubelet conditions, nodeInfo and 40 images
// (kubelet reports at most 50), with bridgehead's label, annotation and
// condition. The API server adds managedFields on create.
func kubeletNode(i int) *corev1.Node {
	name := fmt.Sprintf("aks-nodepool1-12345678-vmss%06d", i)
	ip := fmt.Sprintf("10.%d.%d.%d", 224+i/65536, i/256%256, i%256)
	now := metav1.NewTime(time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC))
	labels := map[string]string{
		"agentpool": "nodepool1", "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "Standard_D4s_v5",
		"beta.kubernetes.io/os": "linux", "failure-domain.beta.kubernetes.io/region": "westeurope", "failure-domain.beta.kubernetes.io/zone": "westeurope-1",
		"kubernetes.azure.com/agentpool": "nodepool1", "kubernetes.azure.com/cluster": "MC_rg_cluster_westeurope", "kubernetes.azure.com/mode": "system",
		"kubernetes.azure.com/node-image-version": "AKSUbuntu-2204gen2containerd-202611.01.0", "kubernetes.azure.com/os-sku": "Ubuntu",
		"kubernetes.azure.com/role": "agent", "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
		"kubernetes.io/role": "agent", "node-role.kubernetes.io/agent": "", "node.kubernetes.io/instance-type": "Standard_D4s_v5",
		"topology.kubernetes.io/region": "westeurope", "topology.kubernetes.io/zone": "westeurope-1", LabelSite: "site-" + strconv.Itoa(i%200),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{
			"csi.volume.kubernetes.io/nodeid":                        `{"disk.csi.azure.com":"` + name + `","file.csi.azure.com":"` + name + `"}`,
			"node.alpha.kubernetes.io/ttl":                           "0",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			AnnotationPodCIDRs:                                       fmt.Sprintf("100.%d.%d.0/24", 64+i/256, i%256),
		}},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("100.%d.%d.0/24", 64+i/256, i%256), PodCIDRs: []string{fmt.Sprintf("100.%d.%d.0/24", 64+i/256, i%256)},
			ProviderID: "azure:///subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/mc_rg_cluster_westeurope/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/" + strconv.Itoa(i)},
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16393356Ki"), corev1.ResourcePods: resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("129886128Ki"), "hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
	}
	n.Status = corev1.NodeStatus{
		Capacity: rl, Allocatable: rl,
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		NodeInfo: corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("%08x-0000-0000-0000-000000000000", i), BootID: fmt.Sprintf("%08x-1111-1111-1111-111111111111", i),
			KernelVersion: "5.15.0-1075-azure", OSImage: "Ubuntu 22.04.5 LTS", ContainerRuntimeVersion: "containerd://1.7.23-1", KubeletVersion: "v1.37.2",
			KubeProxyVersion: "", OperatingSystem: "linux", Architecture: "amd64"},
	}
	for _, c := range []struct{ t, s, r, m string }{
		{"MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{"DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{"PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
		{"Ready", "True", "KubeletReady", "kubelet is posting ready status"},
		{"NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"},
		{string(NodeConditionSite), "True", "Assigned", "site site-" + strconv.Itoa(i%200)},
	} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(c.t), Status: corev1.ConditionStatus(c.s),
			Reason: c.r, Message: c.m, LastHeartbeatTime: now, LastTransitionTime: now})
	}
	for j := range 40 {
		repo := fmt.Sprintf("mcr.microsoft.com/oss/kubernetes/image-%02d", j)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("%s@sha256:%064x", repo, j*7919+1), repo + ":v1.2." + strconv.Itoa(j)},
			SizeBytes: int64(10_000_000 + j*1_000_003),
		})
	}
	return n
}

// BenchmarkNodeCacheHeap measures the controller's Node cache: the Go
// heap held after one informer has synced BRIDGEHEAD_INFORMER_NODES
// (default 10,000) kubelet-like Nodes from the real API server, with the
// full objects and with transformNode (what the controller runs). Run
// with -benchtime 1x; the figures are heap-MiB and bytes/node (the
// cache), alloc-MiB (all allocation during the sync, decoding first) and
// sync-ms.
func BenchmarkNodeCacheHeap(b *testing.B) {
	_, cs, nodes := kubeletNodes(b)
	for _, tc := range []struct {
		name string
		cs   kubernetes.Interface
		opts []informers.SharedInformerOption
	}{
		{"full", cs, nil},
		{"transformNode", cs, []informers.SharedInformerOption{informers.WithTransform(transformNode)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				heap0 := heapAfterGC()
				var ms0 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				start := time.Now()
				f := informers.NewSharedInformerFactoryWithOptions(tc.cs, 0, tc.opts...)
				inf := f.Core().V1().Nodes().Informer()
				stop := make(chan struct{})
				f.Start(stop)
				f.WaitForCacheSync(stop)
				took := time.Since(start)
				var ms1 runtime.MemStats
				runtime.ReadMemStats(&ms1)
				if got := len(inf.GetStore().List()); got != nodes {
					b.Fatalf("%d nodes cached", got)
				}
				heap := heapAfterGC() - heap0
				runtime.KeepAlive(inf)
				close(stop)
				f.Shutdown()
				b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(heap)/float64(nodes), "bytes/node")
				b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/(1<<20), "alloc-MiB")
				b.ReportMetric(float64(took.Milliseconds()), "sync-ms")
			}
		})
	}
}

// heapAfterGC is the live heap after two collections.
func heapAfterGC() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// kubeletNodes starts a real API server holding kubelet-like Nodes
// (BRIDGEHEAD_INFORMER_NODES of them, 10,000 by default; 40 images and
// managedFields each, written as the kubelet's field manager), and
// returns it with a clientset allowed 2,000 requests a second, and the
// count.
func kubeletNodes(b *testing.B) (*kubetest.Env, kubernetes.Interface, int) {
	b.Helper()
	nodes := 10000
	if s := os.Getenv("BRIDGEHEAD_INFORMER_NODES"); s != "" {
		nodes, _ = strconv.Atoi(s)
	}
	env := kubetest.Start(b)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	t0 := time.Now()
	createParallel(b, nodes, 32, func(i int) error {
		_, err := cs.CoreV1().Nodes().Create(ctx, kubeletNode(i), metav1.CreateOptions{FieldManager: "kubelet"})
		return err
	})
	sample, err := cs.CoreV1().Nodes().Get(ctx, kubeletNode(0).Name, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if len(sample.Status.Images) != 40 || len(sample.ManagedFields) == 0 {
		b.Fatalf("sample node: %d images, %d managedFields entries", len(sample.Status.Images), len(sample.ManagedFields))
	}
	b.Logf("created %d Nodes in %s", nodes, time.Since(t0).Round(time.Millisecond))
	return env, cs, nodes
}
