package launcher

import (
	"fmt"
	"net"
	"os"
	"path"
	"slices"
	"strings"
)

// hosts decides the job's hosts: -H or --hostfile (this machine's names
// folded into one local host, the others reached by agents), else inside
// a Slurm allocation its nodes with their task counts (every one reached
// by an srun agent, this node's too, so all ranks run in a job step; with
// --launcher ssh the other nodes over ssh), else this machine alone.
func (job Job) hosts() ([]Host, error) {
	if len(job.Hosts) == 0 {
		hosts, ok, err := slurmAllocation(job.Environ)
		switch {
		case err != nil:
			return nil, err
		case ok && job.Remote.Launcher == "ssh": // the allocation's nodes, over ssh
			return job.Machine.Hosts(hosts), nil
		case ok:
			return hosts, nil
		}
	}
	if job.Remote.Launcher == "srun" {
		if len(job.Hosts) == 0 {
			return nil, fmt.Errorf("--launcher srun: not inside a Slurm allocation (no SLURM_JOB_NODELIST) and no -H")
		}
		return job.Hosts, nil
	}
	return job.Machine.Hosts(job.Hosts), nil
}

// slurmAllocation returns the hosts of the Slurm allocation flexrun runs
// in (SLURM_JOB_NODELIST with SLURM_TASKS_PER_NODE); ok is false outside
// one.
func slurmAllocation(environ []string) (hosts []Host, ok bool, err error) {
	nodes, ok1 := lookupEnv(environ, "SLURM_JOB_NODELIST")
	tasks, ok2 := lookupEnv(environ, "SLURM_TASKS_PER_NODE")
	if !ok1 || !ok2 || nodes == "" || tasks == "" {
		return nil, false, nil
	}
	hosts, err = SlurmHosts(nodes, tasks)
	if err != nil {
		return nil, true, fmt.Errorf("slurm allocation: %w", err)
	}
	return hosts, true, nil
}

// srunMode reports whether agents are started with srun rather than ssh.
func (job Job) srunMode() bool {
	switch job.Remote.Launcher {
	case "srun":
		return true
	case "ssh":
		return false
	}
	_, ok, _ := slurmAllocation(job.Environ)
	return ok && len(job.Hosts) == 0
}

func used(plan []Placement, host string) bool {
	for _, p := range plan {
		if p.Host == host {
			return true
		}
	}
	return false
}

func isLocalHost(hosts []Host, name string) bool {
	for _, h := range hosts {
		if h.Name == name {
			return h.Local
		}
	}
	return false
}

// agentSpecs builds each agent's job: its ranks (GPU from the GPUs it
// counted), and the bootstrap and MASTER_ADDR as its host must dial them.
func (job Job) agentSpecs(rj *remoteJob, plan []Placement, je jobEnv) (map[*agentConn]agentSpec, error) {
	_, port, _ := net.SplitHostPort(je.Bootstrap)
	dir, _ := os.Getwd()
	env := job.remoteEnv()
	prefix := ""
	if job.Remote.Prefix != "" {
		prefix = path.Join(job.Remote.Prefix, "bin")
	}
	var problems hostErrors
	specs := map[*agentConn]agentSpec{}
	for _, a := range rj.conns {
		a.mu.Lock()
		info := a.info
		a.mu.Unlock()
		addr, err := job.bootstrapHost(a.host.Name, info)
		if err != nil {
			problems.add(a.host.Name, err)
			continue
		}
		sj := je
		sj.Bootstrap = net.JoinHostPort(addr, port)
		switch {
		case plan[0].Host == a.host.Name:
			sj.MasterAddr = "127.0.0.1"
		case je.MasterAddr == "127.0.0.1": // rank 0 is on flexrun's host
			sj.MasterAddr = addr
		}
		spec := agentSpec{
			Node: a.node, Program: job.Program, Args: job.Args, Dir: dir, Env: env, PathPrefix: prefix,
			Job: sj, KillGrace: job.KillGrace, Timeout: rj.cfg.AgentTimeout, StdinRank: -1,
			agentBinding: agentBinding{BindTo: job.BindTo, ReportBindings: job.ReportBindings},
		}
		a.mu.Lock()
		a.report = job.Stderr
		a.mu.Unlock()
		for _, p := range plan {
			if p.Host != a.host.Name {
				continue
			}
			p.GPU = -1
			if info.GPUs > 0 {
				p.GPU = p.LocalRank % info.GPUs
			}
			spec.Ranks = append(spec.Ranks, p)
			if p.Rank == 0 && job.Stdin != nil {
				spec.StdinRank = 0
			}
		}
		specs[a] = spec
	}
	return specs, problems.err("cannot tell the ranks how to reach flexrun")
}

// bootstrapHost is the address of this machine that ranks on host dial:
// --bootstrap-addr, else the address of the interface that routes to the
// host, else the address the host saw the ssh connection come from.
func (job Job) bootstrapHost(host string, info agentHello) (string, error) {
	if job.Remote.BootstrapHost != "" {
		return job.Remote.BootstrapHost, nil
	}
	addr, err := routeAddr(host, job.Machine.Resolve)
	if err == nil {
		return addr, nil
	}
	if info.Client != "" {
		return info.Client, nil
	}
	return "", fmt.Errorf("cannot tell which address of this machine it reaches (%v); give --bootstrap-addr", err)
}

// remoteEnv is what the agents set over their own environment before the
// rank variables: the -x exports and flexrun's FLEXLINK_* and NCCL_*
// settings (forwardedSetting). The rest of flexrun's environment stays
// here, as with mpirun: a remote rank starts from its host's login
// environment.
func (job Job) remoteEnv() []string {
	var env []string
	for _, kv := range job.Environ {
		k, _, _ := strings.Cut(kv, "=")
		if forwardedSetting(k) {
			env = setEnv(env, k, kv[len(k)+1:])
		}
	}
	for _, x := range job.Exports {
		k, v, hasVal := strings.Cut(x, "=")
		if !hasVal {
			var ok bool
			if v, ok = lookupEnv(job.Environ, k); !ok {
				continue
			}
		}
		env = setEnv(env, k, v)
	}
	return env
}

// forwardedSetting reports whether flexrun's variable k goes to every
// remote rank as local ranks inherit it: flexlink's settings (FLEXLINK_*)
// and NCCL's (NCCL_*: libnccl maps those with a flexlink meaning onto
// flexlink's settings and names the others), but not those that name one
// host (FLEXLINK_HOSTNAME, NCCL_HOSTID) nor those flexrun sets for each
// rank.
func forwardedSetting(k string) bool {
	switch {
	case k == "FLEXLINK_HOSTNAME" || k == "NCCL_HOSTID" || isRankVar(k):
		return false
	case strings.HasPrefix(k, "FLEXLINK_") || strings.HasPrefix(k, "NCCL_"):
		return true
	}
	return false
}

// domainCounts fills in the NUMA node and socket counts that
// --map-by ppr:N:numa|socket needs: this machine's from CountDomains over
// the ranks' environment env (-x applied, as binding reads it), and for
// other hosts this machine's too, as an estimate until their agents
// report theirs (replanDomains).
func (job Job) domainCounts(hosts []Host, env []string) []Host {
	if job.PerNode == 0 || job.PerUnit == "" || job.PerUnit == PerHost {
		return hosts
	}
	numa, sockets := CountDomains(envLookup(env), "")
	out := slices.Clone(hosts)
	for i := range out {
		if out[i].NUMANodes == 0 {
			out[i].NUMANodes = numa
		}
		if out[i].Sockets == 0 {
			out[i].Sockets = sockets
		}
	}
	return out
}

func (job Job) plan(hosts []Host) ([]Placement, error) {
	return Plan(PlanRequest{Hosts: hosts, NP: job.NP, MapBy: job.MapBy, PerNode: job.PerNode, Unit: job.PerUnit, Oversubscribe: job.Oversubscribe})
}

// replanDomains plans again with the NUMA node and socket counts the
// agents reported, when the mapping depends on them. A host that now gets
// ranks but has no agent is an error.
func (job Job) replanDomains(plan []Placement, hosts []Host, rj *remoteJob) ([]Placement, []Host, error) {
	if rj == nil || job.PerNode == 0 || job.PerUnit == "" || job.PerUnit == PerHost {
		return plan, hosts, nil
	}
	hosts = slices.Clone(hosts)
	for _, a := range rj.conns {
		a.mu.Lock()
		info := a.info
		a.mu.Unlock()
		for i := range hosts {
			if hosts[i].Name == a.host.Name {
				hosts[i].NUMANodes, hosts[i].Sockets = info.NUMANodes, info.Sockets
			}
		}
	}
	next, err := job.plan(hosts)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range next {
		if !isLocalHost(hosts, p.Host) && !used(plan, p.Host) {
			return nil, nil, fmt.Errorf("plan: host %s gets ranks once the agents' %s counts are known, but was not started (give -np)", p.Host, job.PerUnit.name())
		}
	}
	return next, hosts, nil
}
