//go:build !race

package multilink_test

const raceEnabled = false
