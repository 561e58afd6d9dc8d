// Package kube translates between bridgehead's catalog (package config:
// the sites, their gateways and nodes, and the local gateway's relay) and
// the bridgehead.io/v1alpha1 resources (Site, Gateway) plus core/v1 Nodes.
//
// Kubernetes types stay at this edge: the router, the config checks and
// the route renderers never see them. The two models are one: FromConfig
// and ToConfig are inverses over every field of config.Site,
// config.Gateway, config.Node and config.Relay, and a reflect-walking test
// fails when a new config field is not mapped.
//
// Naming: a Site is named after the site; a Gateway is named
// "<site>.<gateway>" (gateway names are unique per site only); a Node
// keeps its name and carries the label bridgehead.io/site. Resource-only
// fields (per-node block sizes) have no config counterpart: FromConfig
// derives them from the nodes' pod CIDRs when those agree.
//
// The relay is a section of one gateway's config file, with a listen
// address on that gateway's LAN side; as a resource it belongs to the
// Site (each gateway listens on its own address at the site's relay
// port), so FromConfig needs the listen address to be the local
// gateway's address, and ToConfig rebuilds the local gateway's section.
package kube
