//go:build race

package bootstrap

// raceEnabled: the race detector slows the scale test about tenfold.
const raceEnabled = true
