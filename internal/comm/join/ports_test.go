package join

import (
	"strconv"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/settings"
)

// TestSlurmPortRange: under srun without flexrun, rank 0's bootstrap port
// is derived inside FLEXLINK_PORT_RANGE when it is set (the same on every
// task of a step), FLEXLINK_SLURM_PORT still wins, and a bad range is an
// error naming the variable.
func TestSlurmPortRange(t *testing.T) {
	env := settings.Map(map[string]string{"FLEXLINK_PORT_RANGE": "50000-50009"})
	seen := map[int]bool{}
	for step := range 40 {
		p, err := slurmPort(env, "4242", strconv.Itoa(step))
		if err != nil || p < 50000 || p > 50009 {
			t.Fatalf("step %d: port %d, %v; want one in 50000-50009", step, p, err)
		}
		if again, _ := slurmPort(env, "4242", strconv.Itoa(step)); again != p {
			t.Fatalf("step %d: port %d then %d", step, p, again)
		}
		seen[p] = true
	}
	if len(seen) < 2 {
		t.Errorf("40 steps all on port %v: the job and step ids do not spread", seen)
	}
	both := settings.Map(map[string]string{"FLEXLINK_PORT_RANGE": "50000-50009", "FLEXLINK_SLURM_PORT": "31337"})
	if p, err := slurmPort(both, "1", "0"); p != 31337 || err != nil {
		t.Errorf("FLEXLINK_SLURM_PORT with a range: %d, %v; want 31337", p, err)
	}
	bad := settings.Map(map[string]string{"FLEXLINK_PORT_RANGE": "50009-50000"})
	if _, err := slurmPort(bad, "1", "0"); err == nil || !strings.Contains(err.Error(), "FLEXLINK_PORT_RANGE") {
		t.Errorf("bad range: %v, want an error naming FLEXLINK_PORT_RANGE", err)
	}
}
