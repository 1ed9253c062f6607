package join

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"

	"github.com/flexlink/flexlink/internal/hostlist"
	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/settings"
)

// slurmStep is what srun tells each task of a step.
type slurmStep struct {
	procID, ntasks, localID, nodeID int
	nodes                           []string // SLURM_STEP_NODELIST, expanded
	jobID, stepID                   string
	nodeName                        string // SLURMD_NODENAME
}

// inSlurmStep reports whether this process is a task of an srun step of
// more than one task (a batch script has SLURM_PROCID but no step id).
func inSlurmStep(getenv func(string) (string, bool)) bool {
	_, a := getenv("SLURM_PROCID")
	_, b := getenv("SLURM_STEP_ID")
	n, _ := getenv("SLURM_STEP_NUM_TASKS")
	return a && b && n != "" && n != "1"
}

// readSlurmStep reads SLURM_PROCID, SLURM_STEP_NUM_TASKS (else
// SLURM_NTASKS), SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_NODELIST,
// SLURM_JOB_ID, SLURM_STEP_ID and SLURMD_NODENAME.
func readSlurmStep(getenv func(string) (string, bool)) (slurmStep, error) {
	var s slurmStep
	num := func(name string, dst *int) error {
		v, _ := getenv(name)
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%q: not a count", name, v)
		}
		*dst = n
		return nil
	}
	ntasks := "SLURM_STEP_NUM_TASKS"
	if v, _ := getenv(ntasks); v == "" {
		ntasks = "SLURM_NTASKS"
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"SLURM_PROCID", &s.procID}, {ntasks, &s.ntasks}, {"SLURM_LOCALID", &s.localID}, {"SLURM_NODEID", &s.nodeID}} {
		if err := num(f.name, f.dst); err != nil {
			return s, err
		}
	}
	if s.procID >= s.ntasks {
		return s, fmt.Errorf("SLURM_PROCID=%d out of range for %s=%d", s.procID, ntasks, s.ntasks)
	}
	list, _ := getenv("SLURM_STEP_NODELIST")
	nodes, err := hostlist.Expand(list)
	if err != nil {
		return s, fmt.Errorf("SLURM_STEP_NODELIST: %w", err)
	}
	s.nodes = nodes
	s.jobID, _ = getenv("SLURM_JOB_ID")
	s.stepID, _ = getenv("SLURM_STEP_ID")
	s.nodeName, _ = getenv("SLURMD_NODENAME")
	if s.jobID == "" || s.stepID == "" {
		return s, fmt.Errorf("SLURM_JOB_ID=%q SLURM_STEP_ID=%q: both are needed", s.jobID, s.stepID)
	}
	return s, nil
}

// slurmPort is rank 0's bootstrap port: FLEXLINK_SLURM_PORT, else derived
// from the job and step ids (in FLEXLINK_PORT_RANGE when it is set, else
// 20000-29999, below Linux's ephemeral ports), so every task computes the
// same port without talking to the others.
func slurmPort(env settings.Env, jobID, stepID string) (int, error) {
	if env.IsSet("FLEXLINK_SLURM_PORT") {
		p, err := env.Int("FLEXLINK_SLURM_PORT")
		if err != nil || p < 1 || p > 65535 {
			return 0, fmt.Errorf("FLEXLINK_SLURM_PORT=%q: want a port number", env.String("FLEXLINK_SLURM_PORT"))
		}
		return p, nil
	}
	pr, err := env.Ports()
	if err != nil {
		return 0, err
	}
	if pr.IsZero() {
		pr = ports.Range{First: 20000, Last: 29999}
	}
	h := fnv.New32a()
	h.Write([]byte(jobID + "." + stepID))
	return pr.First + int(h.Sum32()%uint32(pr.Size())), nil
}

// initSlurm joins a job started by srun without flexrun: rank 0 serves
// the bootstrap on the first node of the step at slurmPort.
func initSlurm(ctx context.Context, env settings.Env, getenv func(string) (string, bool), host string, build Build) error {
	st, err := readSlurmStep(getenv)
	if err != nil {
		return fmt.Errorf("rank init under srun: %w", err)
	}
	if st.procID == 0 && st.nodeName != "" && st.nodeName != st.nodes[0] {
		return fmt.Errorf("rank init under srun: task 0 runs on %s, not on the step's first node %s: use a block distribution (srun -m block) or launch with flexrun", st.nodeName, st.nodes[0])
	}
	port, err := slurmPort(env, st.jobID, st.stepID)
	if err != nil {
		return fmt.Errorf("rank init under srun: %w", err)
	}
	label := "slurm " + st.jobID + "." + st.stepID
	secret, hint, err := jobSecret(env, label)
	if err != nil {
		return fmt.Errorf("rank %d on %s (srun): %w", st.procID, host, err)
	}
	ps := strconv.Itoa(port)
	return joinServed(ctx, env, host, servedJob{
		launcher: "srun", rank: st.procID, size: st.ntasks,
		listen: ":" + ps, dial: net.JoinHostPort(st.nodes[0], ps),
		jobID: "slurm-" + st.jobID + "." + st.stepID, secret: secret, secretHint: hint,
		portHint: " (is port " + ps + " taken on this node? set FLEXLINK_SLURM_PORT)",
	}, nil, build)
}
