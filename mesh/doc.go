// Package mesh is the mesh at a glance: which site reaches which, over
// which path, how fast and how lossy, as the gateways' own probes measure
// it. It is pure model and rendering; it knows neither the router nor
// Kubernetes (the daemon feeds it peers, kube/meshstatus converts its
// rows to and from Gateway status).
//
// # Model
//
// A Link is one gateway's view of one remote gateway: the liveness state
// (up, silent, down, connecting), the path (direct or through a hub), the
// median probe round trip and the probe loss over the recent window, the
// path MTU and the newest answer. A Row folds the links of one remote
// site into one line seen from one gateway: up when every gateway of the
// site answers, degraded when only some do (path standby: flows go to the
// others) or a path carries small packets only, down when none does. A
// Cell folds the rows of every gateway of one site toward one remote
// site: one cell per site pair, the per-gateway rows inside it (JSON
// only). A Matrix is every cell, the sites sorted.
//
// # Speed of red
//
// A cell's colour comes from the liveness state and the age of the newest
// probe answer, never from averages: a link that has not answered for
// two probe intervals (the interval in force for it: IdleFactor times
// longer while it carries none of our traffic) plus a round trip is
// silent, which colours it red like down, while the router takes a
// third interval before it moves flows (router.ProbeMisses). A single
// lost probe can so show red for a fraction of an interval; averages
// (RTT, loss) never decide the colour. RouterRows leave silence out
// (red once the router has a gateway down): published rows use them, so
// a lost probe costs no API write.
//
// # Ownership and concurrency
//
// A Tracker is safe for concurrent use: one goroutine calls Observe on
// its sampling tick, any number call Rows. Matrix values are immutable
// once built; the renderers only read them.
package mesh
