package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// cni adds a pod's network or deletes it the way a container runtime
// does (containerd's CRI plugin, CRI-O): the first network config file of
// the conf dir in lexical order, run through libcni with the plugins of
// the bin dir, the pod's namespace as CNI_NETNS. add prints the pod's
// addresses, one "ip ADDR/LEN" line each.
//
//	bhprobe cni add|del -conf-dir D -bin-dir B -cache-dir C -netns PATH -id ID [-ifname eth0]
func cni(args []string) error {
	if len(args) < 1 || (args[0] != "add" && args[0] != "del") {
		return fmt.Errorf("cni: want add or del")
	}
	fs := flag.NewFlagSet("cni", flag.ExitOnError)
	confDir := fs.String("conf-dir", "/etc/cni/net.d", "CNI config directory")
	binDir := fs.String("bin-dir", "/opt/cni/bin", "CNI plugin directory")
	cacheDir := fs.String("cache-dir", "/var/lib/cni", "libcni's result cache")
	nsPath := fs.String("netns", "", "path of the pod's network namespace")
	id := fs.String("id", "", "container ID")
	ifName := fs.String("ifname", "eth0", "pod interface name")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after")
	fs.Parse(args[1:])
	if *nsPath == "" || *id == "" {
		return fmt.Errorf("cni: -netns and -id are required")
	}
	files, err := libcni.ConfFiles(*confDir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("cni: no network config in %s", *confDir)
	}
	sort.Strings(files)
	list, err := libcni.NetworkConfFromFile(files[0])
	if err != nil {
		return fmt.Errorf("cni: %s: %w", files[0], err)
	}
	c := libcni.NewCNIConfigWithCacheDir([]string{*binDir}, *cacheDir, nil)
	rt := &libcni.RuntimeConf{ContainerID: *id, NetNS: *nsPath, IfName: *ifName}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if args[0] == "del" {
		return c.DelNetworkList(ctx, list, rt)
	}
	res, err := c.AddNetworkList(ctx, list, rt)
	if err != nil {
		return err
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return err
	}
	for _, ip := range r.IPs {
		fmt.Printf("ip %s\n", ip.Address.String())
	}
	return nil
}
