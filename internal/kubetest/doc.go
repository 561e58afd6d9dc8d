// Package kubetest starts a real etcd and kube-apiserver for tests, as
// controller-runtime's envtest does, from the binaries that
// `make kube-testenv` builds into $KUBE_TESTENV_DIR (default
// $HOME/.cache/bridgehead/kube-testenv).
//
// An Env owns two child processes, a temporary directory holding their
// data, certificates and logs, and a kubeconfig for an admin identity (a
// client certificate in group system:masters, so it bypasses RBAC and may
// impersonate anyone). The API server runs with RBAC authorization, so a
// test that impersonates a ServiceAccount sees the refusals a real cluster
// gives. There is no controller-manager or scheduler: objects are stored
// and validated, nothing reconciles them.
//
// When the binaries are missing, Start skips the test, or fails it when
// $CI is set: CI builds them first.
//
// Concurrency: an Env's methods are for the test goroutine that started
// it; Config and Kubeconfig are immutable and safe to share.
package kubetest
