package rank

import (
	"fmt"
	"testing"

	"flexlink/gpu"
)

// What the direct plane does beyond two ranks: the order in which it visits
// peers, the allgather/alltoall mode it picks, and ranks that disagree on
// the flag allreduce's two-shot limit.

// TestRotated: at every step k, rank r visits peer (r+k) mod n, so the
// ranks' targets form a permutation (no GPU serves two visitors at once)
// and no rank visits itself.
func TestRotated(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 8} {
		order := make([][]int, n)
		for me := range n {
			p := &directPlane{n: n, me: me}
			order[me] = p.rotated()
			if len(order[me]) != n-1 {
				t.Fatalf("n=%d rank %d: %d peers, want %d", n, me, len(order[me]), n-1)
			}
		}
		for k := 0; k < n-1; k++ {
			seen := make([]bool, n)
			for me := range n {
				j := order[me][k]
				if j == me || seen[j] {
					t.Errorf("n=%d step %d: rank %d visits %d (self, or taken by another rank)", n, k, me, j)
				}
				seen[j] = true
			}
		}
	}
}

func TestMoveSetting(t *testing.T) {
	for _, tc := range []struct {
		v           string
		n           int
		pull, store bool
		bad         bool
	}{
		{"auto", 2, false, true, false}, {"auto", 3, true, false, false}, {"auto", 8, true, false, false},
		{"store", 4, false, true, false}, {"pull", 2, true, false, false}, {"push", 4, false, false, false},
		{"", 2, false, false, false}, {"fast", 2, false, false, true},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.v, tc.n), func(t *testing.T) {
			pull, store, err := moveSetting(tc.v, "FLEXLINK_GPU_ALLGATHER", tc.n)
			if (err != nil) != tc.bad || !tc.bad && (pull != tc.pull || store != tc.store) {
				t.Errorf("pull %v store %v err %v; want pull %v store %v, error %v", pull, store, err, tc.pull, tc.store, tc.bad)
			}
		})
	}
}

// TestGPUFakeFlagSettingsDisagree: when one rank's flag settings differ
// from the others' (here the two-shot limit), every rank turns the flag
// plane off at setup, instead of running kernels that would not match, and
// the collectives still give the right answers over the handshake paths.
func TestGPUFakeFlagSettingsDisagree(t *testing.T) {
	env := map[string]string{"FLEXLINK_GPU_FLAG_BYTES": "-1", "FLEXLINK_GPU_CHUNK_BYTES": "65536"}
	each := map[int]map[string]string{2: {"FLEXLINK_GPU_FLAG_ONESHOT_BYTES": "4096"}}
	rs := fakeRanksEach(t, 3, gpu.FakeConfig{}, env, each, 3*fakeBig*8)
	for _, r := range rs {
		if f := r.dc.plane.(*directPlane).flag; f != nil {
			t.Fatalf("rank %d: flag plane on (one-shot limit %d) though rank 2 has another limit", r.c.Rank(), f.oneShot)
		}
	}
	cases := []devCase{}
	for _, c := range devCases(3, fakeBig) {
		if c.kind == devAllReduce {
			cases = append(cases, c)
		}
	}
	sweep(t, rs, cases)
}
