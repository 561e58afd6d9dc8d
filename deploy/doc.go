// Package deploy holds what installs and runs bridgehead outside the
// source tree: the systemd unit, the Debian package script, cloud-init and
// Azure templates and the Grafana dashboard. Its tests check those files
// against the code they describe; it has no code of its own.
package deploy
