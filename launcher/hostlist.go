package launcher

import (
	"fmt"

	"github.com/flexlink/flexlink/internal/hostlist"
)

// SlurmHosts turns an allocation's SLURM_JOB_NODELIST and
// SLURM_TASKS_PER_NODE into hosts with that many slots each (a node with
// zero tasks is left out).
func SlurmHosts(nodelist, tasksPerNode string) ([]Host, error) {
	names, err := hostlist.Expand(nodelist)
	if err != nil {
		return nil, err
	}
	counts, err := hostlist.TasksPerNode(tasksPerNode)
	if err != nil {
		return nil, err
	}
	if len(counts) != len(names) {
		return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q gives %d counts for the %d nodes of %q", tasksPerNode, len(counts), len(names), nodelist)
	}
	var hosts []Host
	for i, n := range names {
		if counts[i] > 0 {
			hosts = addHost(hosts, Host{Name: n, Slots: counts[i]})
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("SLURM_TASKS_PER_NODE %q: no tasks on any node", tasksPerNode)
	}
	return hosts, nil
}
