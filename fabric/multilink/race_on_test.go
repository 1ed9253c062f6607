//go:build race

package multilink_test

// raceEnabled: the race detector instruments every byte a copy touches,
// which makes real-time throughput a measure of the detector, not of the
// channel; timing assertions are reported instead of enforced.
const raceEnabled = true
