//go:build !race

package transit

const raceEnabled = false
