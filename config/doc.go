// Package config loads the YAML file that describes the cluster's sites,
// their address plans and gateways, and this gateway's identity.
package config
