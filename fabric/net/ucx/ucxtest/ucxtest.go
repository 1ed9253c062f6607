// Package ucxtest opens the ucx provider for tests of the packages above
// it: UCX's tcp transport on loopback, skipped (through testenv) where
// libucp is missing.
package ucxtest

import (
	"errors"
	"testing"

	"github.com/flexlink/flexlink/fabric/net/ucx"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/testenv"
)

// Loopback opens a ucx provider restricted to UCX's tcp transport on lo
// (UCX_TLS, UCX_NET_DEVICES set for the test), closed when the test ends,
// and returns it with the index of its loopback device.
func Loopback(t *testing.T) (*ucx.Provider, int) {
	t.Helper()
	t.Setenv("UCX_TLS", "tcp")
	t.Setenv("UCX_NET_DEVICES", "lo")
	p, err := ucx.Open(ucx.Options{})
	if errors.Is(err, errs.ErrNotSupported) {
		testenv.Missing(t, "libucx0", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for i, d := range p.Devices() {
		if d.Name == "lo" {
			return p, i
		}
	}
	t.Fatalf("no loopback device in %v", p.Devices())
	return nil, 0
}
