//go:build race

package transit

// raceEnabled: the race detector makes sync.Pool drop items at random,
// so allocation counts of pooled paths are meaningless.
const raceEnabled = true
