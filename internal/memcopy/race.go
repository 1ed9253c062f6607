//go:build race

package memcopy

// raceEnabled: under the race detector every copy is the built-in one,
// which the detector sees (the assembly's stores it would not).
const raceEnabled = true
