// Command etcd is etcd v3.6 built from the module proxy for the tests that
// run a real kube-apiserver (hack/kube-testenv/build.sh).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
