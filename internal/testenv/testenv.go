// Package testenv is the one place tests skip for missing hardware or a
// missing system component. With FLEXLINK_REQUIRE_SYSTEM=1 (set by .ci/run)
// a skip becomes a failure, so CI cannot go green by skipping.
package testenv

import (
	"os/exec"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
)

// Missing skips the test because component is not available (why says what
// was looked for), or fails it when FLEXLINK_REQUIRE_SYSTEM=1.
func Missing(t testing.TB, component, why string) {
	t.Helper()
	msg := "missing system component " + component + ": " + why
	if require() {
		t.Fatalf("%s (FLEXLINK_REQUIRE_SYSTEM=1 makes this a failure)", msg)
	}
	t.Skip(msg)
}

// MissingHardware skips for hardware that CI machines never have (a GPU).
// FLEXLINK_REQUIRE_SYSTEM does not turn it into a failure; FLEXLINK_REQUIRE_GPU=1
// (set by the GPU run script) does.
func MissingHardware(t testing.TB, hw, why string) {
	t.Helper()
	msg := "missing hardware " + hw + ": " + why
	if settings.OS().Bool("FLEXLINK_REQUIRE_GPU") {
		t.Fatalf("%s (FLEXLINK_REQUIRE_GPU=1 makes this a failure)", msg)
	}
	t.Skip(msg)
}

// LookPath returns the path of an executable or skips/fails through Missing.
func LookPath(t testing.TB, component, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, component, name+" not found on PATH")
	}
	return p
}

func require() bool { return settings.OS().Bool("FLEXLINK_REQUIRE_SYSTEM") }

// FewerGPUs skips a test that needs want GPUs on a machine that has fewer
// (have). Unlike MissingHardware it never fails, not even with
// FLEXLINK_REQUIRE_GPU=1: a one-GPU machine is not a broken one, and its
// single-GPU tests still run (and fail when the GPU is broken).
func FewerGPUs(t testing.TB, want, have int) {
	t.Helper()
	t.Skipf("missing hardware: %d gpus (the driver sees %d)", want, have)
}
