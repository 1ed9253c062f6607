package plane

import "testing"

// TestKindWhat: the constant call names match "gpu " + the kind's name
// for every kind, so logs and errors name calls as before.
func TestKindWhat(t *testing.T) {
	for k := AllReduce; k <= AllToAllv; k++ {
		if got, want := k.what(), "gpu "+k.String(); got != want {
			t.Errorf("kind %d: what() = %q, want %q", k, got, want)
		}
	}
}
