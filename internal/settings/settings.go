// Package settings is the one registry of FLEXLINK_* environment variables
// (like NCCL_PARAM): every setting is declared once in Table with its default
// and meaning, and read only through this package. docs/SETTINGS.md's settings
// table is checked against Table by a test.
package settings

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flexlink/flexlink/internal/textdist"
)

// Setting is one environment variable.
type Setting struct {
	Name    string // full variable name, FLEXLINK_...
	Default string // value used when unset or empty
	Doc     string // one line for docs/SETTINGS.md
	Kind    Kind   // the values it takes; checked when read and by Validate
}

const maxInt = math.MaxInt64

// Table lists every setting. Add new ones here, nowhere else.
var Table = []Setting{
	{"FLEXLINK_DEBUG", "WARN", "log level: WARN, INFO, DEBUG or TRACE (like NCCL_DEBUG; TRACE selects every subsystem unless FLEXLINK_DEBUG_SUBSYS is set, and adds a line with the time taken at the end of each collective call); lines are tagged with host and rank", KindWord("WARN", "INFO", "DEBUG", "TRACE")},
	{"FLEXLINK_DEBUG_SUBSYS", "INIT,NET", "subsystems logged below WARN, like NCCL_DEBUG_SUBSYS: comma list of INIT, COLL (one line per collective call), P2P, SHM, NET (links, the balancer's shares), GRAPH (or TOPO), ENV, BOOTSTRAP, ALL; ^ first: all but these (unset with FLEXLINK_DEBUG=TRACE: ALL)", KindListExcept("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "ENV", "BOOTSTRAP", "ALL", "TOPO", "LINK", "BALANCE", "LAUNCH")},
	{"FLEXLINK_DEBUG_FILE", "", "write each rank's log to this file instead of stderr, like NCCL_DEBUG_FILE: %h host, %p pid, %r rank, %% a percent sign (appended to; empty: stderr)", KindString()},
	{"FLEXLINK_RANK", "", "set by the launcher: this process's rank in the world", KindInt(0, maxInt)},
	{"FLEXLINK_WORLD_SIZE", "", "set by the launcher: number of ranks", KindInt(1, maxInt)},
	{"FLEXLINK_LOCAL_RANK", "", "set by the launcher: rank among the ranks on this host", KindInt(0, maxInt)},
	{"FLEXLINK_LOCAL_SIZE", "", "set by the launcher: number of ranks on this host", KindInt(1, maxInt)},
	{"FLEXLINK_NODE_RANK", "", "set by the launcher: index of this host in the job", KindInt(0, maxInt)},
	{"FLEXLINK_BOOTSTRAP", "", "set by the launcher: host:port of the bootstrap store", KindAddr()},
	{"FLEXLINK_JOB_ID", "", "set by the launcher: job identifier (names shared-memory segments)", KindString()},
	{"FLEXLINK_JOB_SECRET", "", "set by the launcher: hex per-job secret; proves membership to the bootstrap (never sent on the wire)", KindHex()},
	{"FLEXLINK_GPU", "", "set by the launcher: GPU index for this rank, local rank mod the host's visible GPUs (-1: none); CUDA_VISIBLE_DEVICES is left alone", KindInt(-1, maxInt)},
	{"FLEXLINK_BOOTSTRAP_TIMEOUT", "60s", "how long Init waits for every rank to join the bootstrap (0: no limit; flexrun's --bootstrap-timeout, which sets it, refuses 0)", KindDuration()},
	{"FLEXLINK_LIVENESS_TIMEOUT", "30s", "how long a rank and the bootstrap server may each stay silent (not even a heartbeat: they go out every quarter of it, at most every 400 ms) before the other declares it lost; a closed connection or a dead process is noticed at once whatever this is (flexrun --liveness-timeout sets it; more than 0)", KindPositiveDuration()},
	{"FLEXLINK_HOSTNAME", "", "this host's name as ranks and flexrun's agents report it (empty: the system host name); ranks with equal names talk over shm, others over tcp", KindString()},
	{"FLEXLINK_SLURM_PORT", "", "srun without flexrun: port of rank 0's bootstrap server on the step's first node (empty: derived from a hash of the job and step ids, in FLEXLINK_PORT_RANGE when set, else 20000-29999)", KindInt(1, 65535)},
	{"FLEXLINK_KEY_FILE", "", "srun or mpirun without flexrun: the user's key (0600) from which each job's secret is derived (empty: ~/.config/flexlink/job.key, created when missing); see docs/LAUNCH.md", KindString()},
	{"FLEXLINK_STALL_REPORT", "5s", "C library: how long a collective may wait for its peers on the caller's thread, or a rank may make no call while a member has not made every call it enqueued on the GPU, before the rank asks which members have not called it and reports them (its last error; under flexrun, evidence for the verdict, withdrawn once they call); the call goes on waiting (0: never ask)", KindDuration()},
	{"FLEXLINK_TIMEOUT", "0", "default deadline of one collective when the caller's context has none (0: none; peer loss is still detected)", KindDuration()},
	{"FLEXLINK_TRANSPORT", "auto", "host links: auto (shm within a host, the network transport across hosts, one link per rail), shm, net (the network transport for every pair, the NIC loopback within a host) or tcp (one host TCP link per pair: the tcp provider on the FLEXLINK_SOCKET_IFNAME interface)", KindWord("auto", "shm", "net", "tcp")},
	{"FLEXLINK_NET", "auto", "network transport provider: tcp (pure Go, striped sockets), ucx (libucp: verbs where an RDMA NIC is), or auto (ucx where libucp loads and an RDMA device exists, else tcp, with one INFO line saying why)", KindWord("auto", "tcp", "ucx")},
	{"FLEXLINK_NET_IFNAME", "", "network transport (tcp provider): interfaces used as NICs, one rail each, NCCL_SOCKET_IFNAME syntax (comma-separated prefixes; ^ excludes; = exact); loopback only when named or when nothing else is up (empty: FLEXLINK_SOCKET_IFNAME, then all)", KindString()},
	{"FLEXLINK_NET_SOCKETS", "2", "network transport (tcp provider): TCP sockets per connection (1..64); messages of FLEXLINK_NET_STRIPE_BYTES and more are striped across them", KindInt(1, 64)},
	{"FLEXLINK_NET_STRIPE_BYTES", "65536", "network transport (tcp provider): smallest message striped across a connection's sockets", KindBytes(1, 1<<30)},
	{"FLEXLINK_NET_TIMEOUT", "10s", "network transport (tcp provider): a peer silent this long (no data, acknowledgement or heartbeat) is lost; heartbeats go out every fifth of it", KindDuration()},
	{"FLEXLINK_NET_RAILS", "all", "network transport: most NICs (rails) one pair of ranks on different hosts uses at once, each a link of a multi-link channel whose shares the balancer learns (all or 0, the default: every NIC both hosts have, up to 8, the links a channel balances; 1: the first pair only). NICs pair by IPv4 subnet (one subnet per rail), in the order of the lower rank's NICs; NICs without a subnet pair by position (docs/NET.md)", KindInt(0, 64, "all")},
	{"FLEXLINK_NET_TAIL", "0.25", "network transport, a pair of ranks over several NICs (rails): the fraction (0 to 0.5) of a message of 4 MiB or more that is not split by the balancer's shares but handed out in pieces, each to the NIC that just delivered its part, so the NICs finish the message together when their rates move within it; only the last message sent to a peer keeps its tail (0: off; docs/NET.md, \"The tail of a message\")", KindFloat(0, 0.5)},
	{"FLEXLINK_PORT_RANGE", "", "TCP ports every listener of the job takes, FIRST-LAST (50000-50100): flexrun's bootstrap server and MASTER_PORT, the C library's rendezvous, the network transport's listeners (tcp provider, ucx side channel); each takes the first free port in order, so ranks of one host share the range (empty: ephemeral ports, and MASTER_PORT a free port below the ephemeral range; flexrun --port-range sets it)", KindPortRange()},
	{"FLEXLINK_SOCKET_IFNAME", "", "network interface (or prefix, ^ to exclude) for tcp links, like NCCL_SOCKET_IFNAME", KindString()},
	{"FLEXLINK_SOCKETS_PER_PEER", "2", "tcp sockets per peer pair", KindInt(1, 16)},
	{"FLEXLINK_SOCKET_TIMEOUT", "10s", "tcp links: a peer silent this long (no data, no heartbeat) is declared lost; heartbeats go out every fifth of it", KindDuration()},
	{"FLEXLINK_SHM_RING_BYTES", "4194304", "bytes in each direction of a shared-memory ring", KindBytes(64<<10, 1<<30)},
	{"FLEXLINK_SHM_CMA_BYTES", "auto", "shm links: messages of at least this many bytes are pulled by the receiver straight from the sender's memory (process_vm_readv: one copy instead of two through the ring; the ring is used where the kernel forbids it); auto (the default): from 64 KiB where a measurement at connect time (~4 ms) finds it cheaper than the ring copies (docs/PERF.md: Host memory, eighteenth session); 0: off", KindBytes(0, maxInt, "auto")},
	{"FLEXLINK_ALGO", "auto", "collective algorithm: auto (by size: rd below FLEXLINK_ALGO_THRESHOLD; above it, allreduce by host where the ranks span hosts with as many ranks each, else ring), ring (one ring over every rank, every size), rd (recursive doubling / latency-optimised) or hier (allreduce by host at every size: reduce on the host, exchange each rank's share between hosts, gather on the host)", KindWord("auto", "ring", "rd", "hier")},
	{"FLEXLINK_ALGO_THRESHOLD", "65536", "message size in bytes below which auto picks the latency-optimised algorithm", KindBytes(0, maxInt)},
	{"FLEXLINK_CHUNK_BYTES", "4194304", "pipeline chunk size of ring and chain algorithms on host buffers (1 or more; at most 4 MiB) (docs/PERF.md: Host memory, eighteenth session)", KindBytes(1, maxInt)},
	{"FLEXLINK_LINKS", "", "restrict the links used between a pair, e.g. nvlink or nvlink,pcie (empty: all, but no net part within a host); nvlink,pcie,net adds, between GPUs of one host, the NIC loopback path as a third share of large pushes that the balancer learns (docs/GPU.md)", KindList("nvlink", "pcie", "net", "shm", "tcp", "fake")},
	{"FLEXLINK_CACHE_DIR", "", "where link profiles are cached (empty: the user's cache directory)", KindString()},
	{"FLEXLINK_TOPO_FILE", "", "load the host topology from this file instead of detecting it (JSON, YAML or NCCL XML)", KindString()},
	{"FLEXLINK_TOPO_DUMP_FILE", "", "write the detected host topology to this file", KindString()},
	{"FLEXLINK_RAILS", "", "NIC names in rail order, comma-separated (mlx5_0,mlx5_1,...): NIC i is rail i on this host (empty: numbered by nearest GPU)", KindList()},
	{"FLEXLINK_PXN", "off", "PXN routes across hosts, like NCCL_P2P_PXN_LEVEL: off (every rank uses every NIC, FLEXLINK_NET_RAILS at once), 0 each rank sends from its own NIC only (no relay), 1 relay only for ranks whose GPU has no NIC near it, 2 rail-aligned (AllToAll and AllToAllv messages on host buffers leave from the NIC on their destination's rail, handed over shm to the local rank that owns it); see docs/PXN.md", KindWord("off", "0", "1", "2")},
	{"FLEXLINK_RINGS", "auto", "ring collectives (allreduce, reduce-scatter, allgather) of a communicator spanning hosts: auto (where every rank sends from one NIC of its own, as with FLEXLINK_PXN 0-2, one ring per rail, each leaving every host from a rank on its rail, so every NIC carries a share as NCCL's channels do; else one ring in rank order) or 1 (one ring in rank order: one NIC per host carries them under PXN); see docs/PXN.md", KindWord("auto", "1")},
	{"FLEXLINK_PXN_GPU_HANDOFF", "0", "with FLEXLINK_PXN 0-2, all-to-alls of GPU buffers: 1 = each rank copies its blocks for a relay straight into the relay's GPU staging (CUDA IPC: NVLink between GPUs, a device copy on a shared GPU), and the relay copies them to host memory once and sends them from its NIC; 0 (the default) = each rank stages its blocks through its own pinned memory and hands them to the relay over shm. Where a sibling's staging cannot be opened (ranks in one process, GPUs without peer access) the call takes the shm hand-off; see docs/PXN.md", KindBool()},
	{"FLEXLINK_PXN_GROUP", "1", "with FLEXLINK_PXN 0-2: grouped sends and receives on host buffers (Group, Send, Recv) whose route goes through a relay follow it too: every rank starts its PXN proxy and group service when a communicator spanning hosts is made, and a message leaves from the NIC on its destination's rail, handed over shm to the local rank that owns it (the default, so that a group on a rail-optimised cluster with PXN on does not cross the spine); 0: groups take the communicator's links; no effect while FLEXLINK_PXN is off; see docs/PXN.md", KindBool()},
	{"FLEXLINK_NET_DEVICES", "", "network transport: the NICs this rank uses, a comma list of device names (like NCCL_NET_DEVICES / NCCL_IB_HCA); empty: every NIC, or with FLEXLINK_PXN 0-2 the rank's own: its GPU's NICs as the topology planner assigns them (FLEXLINK_GPU; every GPU its own NIC where there are as many), else local rank i takes the i-th. Two ranks pair the NICs that share an IPv4 subnet (a rail); with none in common their first NICs pair, routed across rails", KindString()},
	{"FLEXLINK_GPU_PATH", "auto", "device-buffer collectives: auto (direct IPC path when every rank is on one host with peer access between all GPUs, else staged), direct, or staged (through pinned host memory and the host algorithms)", KindWord("auto", "direct", "staged")},
	{"FLEXLINK_GPU_ENQUEUE", "sync", "GPU collectives past the flag kernels' eager limits (FLEXLINK_GPU_FLAG_COLL_BYTES; allreduce has none): sync (they take the copy-engine paths, which meet the peers through host messages, so the call returns once its peers have reached it) or async (the flag kernels take every size of every collective they serve, and two-rank send/recv, as in a CUDA graph capture: the call enqueues its kernel and returns, and the peers meet inside the GPU, as NCCL's do). Ranks sharing a GPU without CUDA MPS run as with sync. See docs/GPU.md", KindWord("async", "sync")},
	{"FLEXLINK_GPU_GRAPH_RECORD", "auto", "how a flag call captured in a CUDA graph records its end for the calls after the graph (an event record node): chain (in the stream's chain, after the call's kernel), branch (a side branch the kernels do not wait for) or auto (branch for a call of one thread block, chain otherwise). Measured on 2xH200 (docs/PERF.md, section Two H200s, twentieth session): a branch saves a replayed call of one block ~0.4 us and costs one of two blocks or more 1-1.5 us. See docs/GPU.md", KindWord("auto", "chain", "branch")},
	{"FLEXLINK_GPU_SHARED", "auto", "direct GPU path when every rank of a communicator is on one GPU (several processes sharing it): auto (leader without CUDA MPS; under MPS, which every rank's GPU reports, the flag kernels and events as on separate GPUs: the ranks' kernels then run at once), leader (the lowest rank maps every rank's buffers and runs each collective in its own CUDA context; the others wait on the host for its done event and return with their stream idle: no GPU wait across processes, which time-slice one GPU without MPS) or events (each rank runs its part, ordered by IPC events, as on several GPUs). Group (send/recv) calls always take events; see docs/GPU.md", KindWord("auto", "leader", "events")},
	{"FLEXLINK_GPU_CHUNK_BYTES", "16777216", "largest pipeline chunk of the direct GPU allreduce (reduce of chunk k+1 overlaps the copies of chunk k)", KindBytes(64<<10, maxInt)},
	{"FLEXLINK_GPU_COPY_STREAMS", "1", "direct GPU path: copy streams per peer that a large push is split over (one copy engine each)", KindInt(1, 16)},
	{"FLEXLINK_GPU_ALLREDUCE", "read", "direct GPU allreduce when the flag kernel does not take it (see FLEXLINK_GPU_FLAG_BYTES): read (kernels read the peers' buffers over NVLink, copy engines push the results; takes the PCIe share), push (copy engines write into the peers' scratch, reductions read local memory only), or auto (push for blocks of 4 MiB and more)", KindWord("read", "push", "auto")},
	{"FLEXLINK_GPU_ALLGATHER", "auto", "direct GPU allgather above the flag kernels' range: store (a kernel on this rank's SMs writes its block into every peer's recv over NVLink, and its own block in the same pass; takes the PCIe share; measured fastest on 2xH200), push (the same with copy engines), pull (a kernel reads every peer's send; NVLink only; measured fastest on 4xH200), or auto (store with 2 ranks, pull with more)", KindWord("store", "push", "pull", "auto")},
	{"FLEXLINK_GPU_ALLTOALL", "auto", "direct GPU alltoall above the flag kernels' range: store (a kernel writes block j into peer j's recv; takes the PCIe share), push (the same with copy engines), pull (a kernel reads block Rank() of every peer's send; NVLink only), or auto (store with 2 ranks, pull with more)", KindWord("store", "push", "pull", "auto")},
	{"FLEXLINK_GPU_FLAG_BYTES", "-1", "direct GPU path: largest allreduce (bytes) that runs on flag kernels (one per rank, or three for a two-shot call; SM stores into the peers' slots, counters in device memory, no host handshake); -1: auto (every size; beyond 2 ranks calls over FLEXLINK_GPU_FLAG_ONESHOT_BYTES run two-shot), 0: off", KindBytes(-1, maxInt)},
	{"FLEXLINK_GPU_FLAG_COLL_BYTES", "-1", "direct GPU path: largest per-peer block (bytes) of a reduce-scatter, allgather or alltoall that runs as one flag kernel per rank (and the largest broadcast or reduce) (no host handshake; larger ones take the copy-lane paths); -1: auto (16 MiB), 0: off. Needs the flag allreduce on (FLEXLINK_GPU_FLAG_BYTES not 0)", KindBytes(-1, maxInt)},
	{"FLEXLINK_GPU_FLAG_ONESHOT_BYTES", "-1", "flag allreduce with more than two ranks: the largest call (bytes) that pushes the whole vector to every peer (one-shot: one kernel, the fewest steps); larger ones run as a reduce-scatter kernel then an allgather kernel (two-shot: each rank sends 2(n-1)/n of the vector instead of n-1 times it); -1: auto (2 MiB). With two ranks every call is one-shot (it moves as many bytes)", KindBytes(-1, maxInt)},
	{"FLEXLINK_GPU_FLAG_LINES", "1", "flag kernels: small calls (one chunk of at most 8 KiB per block, up to 128 blocks' worth over the peers: 1 MiB per peer with two ranks, 42 blocks with four, 18 with eight) send their data as 16-byte lines that carry their own flags (8 bytes of data each), which the receiver polls: no fence and no counter per call, as NCCL's LL protocol; 0: every call through the slots and counters. Every rank must have the same value", KindBool()},
	{"FLEXLINK_GPU_FLAG_BLOCKS", "128", "flag allreduce: most thread blocks per call (1 to 160, at most the GPU's SMs); each pushes and folds its own chunks", KindInt(1, 160)},
	{"FLEXLINK_GPU_FLAG_PCIE_BLOCKS", "0", "flag allreduce with two ranks, calls of 32 MiB and more: thread blocks that move the balancer's PCIe share through pinned host memory beside the NVLink blocks; 0 (the default): NVLink only, because on 2xH200 the PCIe part did not pay reliably (docs/PERF.md); FLEXLINK_LINKS without pcie turns it off too", KindInt(0, 32)},
	{"FLEXLINK_GPU_FLAG_REGION_BYTES", "134217728", "flag kernels: device memory per rank for the slots its peers push into, for calls of 32 MiB and more (split over peers x blocks x 2 slots: 512 KiB slots with 2 ranks and 128 blocks; larger slots amortise the per-chunk synchronisation); smaller calls use a second region of a quarter of it times (ranks-1)/ranks (64 KiB slots)", KindBytes(0, maxInt)},
	{"FLEXLINK_GPU_KERNEL_TIMEOUT", "10m", "how long a flag kernel waits for a peer inside the GPU (counted from its start, so also how late a peer may come to a collective) before it gives up; the next call and DeviceComm.AsyncError then fail naming the peer; 0: no limit (a lost peer still ends the kernels when the job aborts)", KindDuration()},
	{"FLEXLINK_GPU_STAGED_CHUNK_BYTES", "auto", "staged GPU path (ranks that cannot map each other's memory, e.g. on other hosts): calls larger than two chunks are cut into chunks of this many bytes so the copy to the host, the host collective (the wire) and the copy back overlap; auto: 4 MiB for allgather, broadcast, all-to-all and send/recv, reductions whole (measured: chunked host allreduces were slower); 0: off", KindBytes(0, 1<<40, "auto")},
	{"FLEXLINK_PCIE_STAGING_BYTES", "67108864", "direct GPU path: bytes of the shared pinned host buffer per ordered GPU pair that stages the PCIe share of large pushes (one per peer on each rank; the PCIe part of a call is capped at it); 0: NVLink only", KindBytes(0, 1<<34)},
	{"FLEXLINK_PCIE_SHARE", "", "direct GPU path: a fixed PCIe fraction (0 to 0.5) of every large push instead of the balancer's choice, for experiments (empty: the balancer decides, with FLEXLINK_LINKS and the profile cache)", KindFloat(0, 0.5)},
	{"FLEXLINK_GPU_NET_SHARE", "", "direct GPU path with FLEXLINK_LINKS=nvlink,pcie,net: a fixed net fraction (0 to 0.5) of every large push instead of the balancer's choice, for experiments (empty: the balancer decides)", KindFloat(0, 0.5)},
	{"FLEXLINK_GPU_PTX", "", "path of one PTX file that replaces the compiled GPU kernels (kernel development; see gpu/kernels/README.md)", KindString()},
	{"FLEXLINK_STACK_DUMP_AFTER", "0", "libnccl.so.2: write every goroutine's stack of the library to stderr this long after the first NCCL call (where a hung job's ranks wait; 0: never)", KindDuration()},
	{"FLEXLINK_CPU_PROFILE", "", "libnccl.so.2: write a Go CPU profile of the library to this file, from the first NCCL call for FLEXLINK_CPU_PROFILE_SECONDS (finding where a call's host time goes; empty: none)", KindString()},
	{"FLEXLINK_CPU_PROFILE_SECONDS", "20", "libnccl.so.2: how long FLEXLINK_CPU_PROFILE records", KindInt(1, 3600)},
	{"FLEXLINK_GPU_KERNELS", "", "directory of compiled GPU kernels laid out like gpu/kernels/fatbin (MANIFEST and one .fatbin.gz per family) that replaces the embedded ones; needed by binaries built with the tag flexlink_noptx", KindString()},
	{"FLEXLINK_REQUIRE_GPU", "0", "tests: fail instead of skip when no GPU/libcuda is found (set by scripts/gpu-run.sh)", KindBool()},
	{"FLEXLINK_REQUIRE_SYSTEM", "0", "tests: fail instead of skip when a system component (libcuda, OpenMPI, sshd, Slurm) is missing", KindBool()},
}

func lookup(name string) Setting {
	for _, s := range Table {
		if s.Name == name {
			return s
		}
	}
	panic("settings: " + name + " is not declared in settings.Table")
}

// Env reads variables; tests pass a map, programs pass os.LookupEnv.
// Every getter checks the value against the setting's Kind; Validate
// checks all of them at once.
type Env func(string) (string, bool)

// OS is the process environment, with NCCL's variables that mean a
// flexlink setting read as it (WithNCCL, nccl.go).
func OS() Env { return WithNCCL(os.LookupEnv) }

// Map makes an Env from a map (for tests and for building child environments).
func Map(m map[string]string) Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// String returns the setting's value, or its default when unset or empty.
// It does not check the value: Validate does (or the typed getters).
func (e Env) String(name string) string {
	s := lookup(name)
	if v, ok := e(name); ok && v != "" {
		return v
	}
	return s.Default
}

// IsSet reports whether the variable is set to a non-empty value.
func (e Env) IsSet(name string) bool {
	lookup(name)
	v, ok := e(name)
	return ok && v != ""
}

// Check checks the setting's value (its default when unset) against its
// Kind; the error names the variable, the value and what is allowed.
func (e Env) Check(name string) error {
	return checkValue(lookup(name), e.String(name))
}

func checkValue(s Setting, v string) error {
	if v == "" {
		return nil
	}
	if err := s.Kind.Check(v); err != nil {
		detail := ""
		if err != errBad {
			detail = " (" + err.Error() + ")"
		}
		return fmt.Errorf("%s=%q: want %s%s", s.Name, v, s.Kind.Allowed, detail)
	}
	return nil
}

// checked is name's value, trimmed, after checking it against the
// setting's Kind ("" when unset): what Int, Float and Duration parse.
func (e Env) checked(name string) (Setting, string, error) {
	s := lookup(name)
	v := strings.TrimSpace(e.String(name))
	if v == "" {
		return s, "", nil
	}
	return s, v, checkValue(s, v)
}

// Int parses the setting as an integer (a size in bytes may carry a K, M
// or G suffix) after checking it against the setting's Kind.
func (e Env) Int(name string) (int, error) {
	s, v, err := e.checked(name)
	if v == "" || err != nil {
		return 0, err
	}
	var n int64
	if s.Kind.bytes {
		n, err = parseBytes(v)
	} else {
		n, err = strconv.ParseInt(v, 10, 64)
	}
	if err != nil || n != int64(int(n)) {
		return 0, fmt.Errorf("%s=%q: not an integer", name, v)
	}
	return int(n), nil
}

// Float parses the setting as a number after checking it against the
// setting's Kind (KindFloat); empty is 0.
func (e Env) Float(name string) (float64, error) {
	_, v, err := e.checked(name)
	if v == "" || err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a number", name, v)
	}
	return f, nil
}

// Duration parses the setting as a Go duration ("90s"); a bare number is
// seconds. A negative or malformed value is an error naming the variable.
func (e Env) Duration(name string) (time.Duration, error) {
	_, v, err := e.checked(name)
	if v == "" || err != nil {
		return 0, err
	}
	d, err := parseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a duration", name, v)
	}
	return d, nil
}

// Bool is true for 1, true, yes, on (any case); anything else is false
// (Validate reports a value that is neither yes nor no).
func (e Env) Bool(name string) bool {
	b, _ := parseBool(e.String(name))
	return b
}

// Validate checks every setting env sets against its Kind, and every NCCL
// alias it sets (nccl.go), and returns
// every problem at once (errors.Join), each naming the variable, its value
// and what is allowed; nil when all are good.
func Validate(env Env) error {
	var errs []error
	for _, s := range Table {
		if v, ok := env(s.Name); ok && v != "" {
			if err := checkValue(s, v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, checkNCCL(env)...)
	return errors.Join(errs...)
}

// Warnings returns one line for each FLEXLINK_ variable of environ
// ("NAME=value" strings, as os.Environ returns them) that Table does not
// declare, naming the declared setting nearest to it; a program logs them
// at WARN (a typo would otherwise be silently ignored).
func Warnings(environ []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "FLEXLINK_") || seen[name] || known(name) {
			continue
		}
		seen[name] = true
		out = append(out, fmt.Sprintf("%s is not a flexlink setting (did you mean %s?); it is ignored", name, nearest(name)))
	}
	return out
}

func known(name string) bool {
	return slices.ContainsFunc(Table, func(s Setting) bool { return s.Name == name })
}

// nearest is the declared name with the smallest edit distance to name.
func nearest(name string) string {
	best, bestD := "", math.MaxInt
	for _, s := range Table {
		if d := textdist.Distance(name, s.Name); d < bestD {
			best, bestD = s.Name, d
		}
	}
	return best
}

// Markdown renders Table as docs/SETTINGS.md's settings table.
func Markdown() string {
	rows := append([]Setting(nil), Table...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, s := range rows {
		d := s.Default
		if d == "" {
			d = "—"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", s.Name, d, s.Doc)
	}
	return b.String()
}
