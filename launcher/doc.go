// Package launcher starts and supervises the ranks of a flexlink job; it is
// the body of the flexrun command.
//
// # Placement
//
// Hosts come from -H (ParseHostList) or an OpenMPI hostfile
// (ParseHostfile); inside a Slurm allocation without either, from
// SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE (SlurmHosts); otherwise the
// job runs on this host with one slot per GPU, or per CPU core when there
// is none. Every name of this machine folds into one local host
// (Machine.Hosts). Plan is a pure function from hosts, slots, rank count
// and ranks per node (-N, --map-by ppr:N:node) to Placements.
//
// # Binding
//
// With --bind-to core or numa (BindTo), Bind decides each rank's CPUs from
// its host's CPUTopology (LoadCPUTopology: this process's affinity, NUMA
// nodes and GPUs' nodes from FLEXLINK_TOPO_FILE or detection). The process
// that forks the rank applies them: flexrun for local ranks, the host's
// agent for remote ones, by setting the spawning thread's affinity just
// before the fork (spawner.start), so the rank holds them from its first
// instruction. --report-bindings prints one BindingLine per rank.
//
// # Other hosts
//
// Ranks on other hosts are started by one agent per host, `flexrun agent`
// (RunAgent), reached with the system ssh (Remote, ssh.go) or, inside a
// Slurm allocation, with one srun step. Every agent says hello and accepts
// the job (finds the program) before any rank starts anywhere; problems
// are reported per host. The agent protocol (agentwire.go) carries the
// job, signals, a remote rank 0's stdin, and back the ranks' output and
// exits; flexrun forwards remote output through the same line forwarder as
// local output. A host whose connection ends, or that is silent for
// Remote.AgentTimeout, is lost: flexrun names it and tears the job down,
// and the agent kills its ranks when flexrun goes away. See
// docs/LAUNCH.md.
//
// # Naming the cause
//
// When a rank fails, flexrun collects the evidence for a short window
// (Deadlines.CauseGrace) and names the first cause on one line, the
// ranks that failed because of it on a second (judge.go, firstcause.go):
// how each rank ended (reaped here in the kernel's order, or reported by
// its agent) and what the bootstrap server saw (BootstrapReport: who
// joined, said goodbye, was lost or refused, and every communicator's
// end as its members published it, with the call they were in). Silence
// counts only after Deadlines.LivenessTimeout (FLEXLINK_LIVENESS_TIMEOUT),
// so a paused flexrun does not end a healthy job. docs/ERRORS.md lists
// every verdict.
//
// # Environment of a rank
//
// flexrun's environment, with -x VAR=value applied, plus:
//
//	FLEXLINK_RANK, FLEXLINK_WORLD_SIZE, FLEXLINK_LOCAL_RANK,
//	FLEXLINK_LOCAL_SIZE, FLEXLINK_NODE_RANK    the placement
//	FLEXLINK_BOOTSTRAP                         host:port of the job's store
//	FLEXLINK_JOB_ID, FLEXLINK_JOB_SECRET       job id; hex of 32 random bytes
//	FLEXLINK_BOOTSTRAP_TIMEOUT                 --bootstrap-timeout
//	FLEXLINK_GPU                               local rank mod visible GPUs, -1 if none
//	RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//
// The last line is what PyTorch's env:// initialisation reads; MASTER_PORT
// is a free port distinct from the bootstrap's. On other hosts the base is
// the host's own environment plus the -x exports and flexrun's FLEXLINK_*
// settings, and FLEXLINK_BOOTSTRAP and MASTER_ADDR name addresses that host
// reaches. CUDA_VISIBLE_DEVICES is
// left as it is (when set, it decides how many GPUs are counted).
//
// # Output
//
// Each rank's stdout and stderr go to flexrun's stdout and stderr in whole
// lines: a line is written with one call, so two ranks never share a line.
// A final line without a newline gets one; a line longer than MaxLine
// (1 MiB) is cut into MaxLine pieces, each ended with a newline. With
// --tag-output each line starts with OpenMPI's tag, "[1,RANK]<stdout>:" or
// "[1,RANK]<stderr>:"; with --timestamp-output each line starts with the
// time flexrun received it in ctime form (StampLayout), followed by the tag
// or, without --tag-output, by "<stdout>:" or "<stderr>:", as mpirun does. With --output-dir DIR the
// rank's bytes, untouched and untagged, also go to DIR/rank.N/stdout and
// DIR/rank.N/stderr. Rank 0 reads flexrun's stdin; the others read
// /dev/null.
//
// # Failure, signals and exit codes
//
// Every rank runs in its own process group, and signals go to the group.
// When a rank exits non-zero or dies by a signal, flexrun waits up to
// --cause-grace (1 s; less once every rank has ended) for the other
// ranks' ends, names the cause on its first line and the ranks that failed
// because of it on a second:
//
//	flexrun: rank 2 (host h, pid 1234) exited with status 3; terminating 1 other rank
//	flexrun: ranks 0, 1 stopped: peer rank 2 lost
//
// The cause is a host that was lost, else a rank stopped by a signal
// (SIGSTOP: "was stopped by signal 19 (SIGSTOP)", exit code 147), else the
// rank whose loss the bootstrap server found when that was the job's first
// failure, else the first rank to end that is not known to have failed
// because of a peer.
// Local ranks are reaped in the order the kernel saw them end (pidfds
// under one epoll); a rank that exits with ExitPeerLost (75), or whose
// abort told the bootstrap that it lost a peer, is a consequence; a rank
// killed by a signal goes before one that exited with a status within
// 50 ms of it (and always when the ranks run on several hosts, whose
// reports race). flexrun then aborts the bootstrap store with the cause's
// words (wrapping errs.ErrPeerLost), sends SIGTERM (and SIGCONT, so that a
// stopped rank acts on it) to every other rank, SIGKILL after
// --kill-grace, and exits with the cause's code (128+signal for a
// signal). The bootstrap server's own lines about the failure (rank lost,
// job failed) are logged at DEBUG: the two lines say it. --timeout tears
// the job down the same way with exit code 124. SIGINT and SIGTERM to
// flexrun send SIGTERM to every
// rank (either way; a second one while tearing down sends SIGKILL at once)
// and flexrun exits 130 or 143. SIGUSR1 and SIGUSR2 are forwarded as they
// are. If flexrun itself is killed, each rank gets SIGKILL from the kernel
// (Pdeathsig; children a rank started itself are not covered), and the
// bootstrap connection drops, which the rank runtime notices.
//
// # Settings and flags
//
// Before any rank starts, the ranks' FLEXLINK_* settings (flexrun's
// environment with -x applied) are checked by the settings registry
// (settings.Validate): a bad value ends flexrun with exit code 1 and a
// line per bad variable naming its value and what is allowed; an unknown
// FLEXLINK_ variable gets one WARN line naming the nearest known setting.
// Duration flags take Go durations of 0 or more ("2s"; a bare "2" is
// refused with that hint).
//
// Once every rank has exited, each rank's output gets --kill-grace to reach
// end of file (a process the rank left behind may hold it open); then what
// is left of the rank's process group is killed.
package launcher
