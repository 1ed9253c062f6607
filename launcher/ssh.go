package launcher

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// Defaults of the remote launch.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultLaunchTimeout  = 30 * time.Second
	DefaultAgentTimeout   = 10 * time.Second
	DefaultMaxParallel    = 64
)

// Remote configures how flexrun reaches hosts other than its own: one
// agent per host (`flexrun agent`), started with the system ssh, or with
// srun inside a Slurm allocation.
type Remote struct {
	// Launcher is "ssh" or "srun"; "" picks srun inside an allocation
	// whose hosts are the job's (Job.Slurm), else ssh.
	Launcher string
	SSH      string   // ssh program; "": "ssh"
	SSHArgs  []string // extra ssh arguments (--ssh-args, split), before the host
	Srun     string   // srun program; "": "srun"
	SrunArgs []string // extra srun arguments
	// Prefix is where flexrun is installed on the other hosts: the agent
	// runs PREFIX/bin/flexrun, or PREFIX/flexrun when there is no
	// PREFIX/bin/flexrun, and the ranks get that directory first on PATH
	// (like mpirun --prefix). "": flexrun on the remote PATH (ssh), this
	// executable's path (srun, which assumes a shared file system).
	Prefix         string
	ConnectTimeout time.Duration // ssh -o ConnectTimeout; 0: 10 s
	// LaunchTimeout bounds the time from starting an agent to its hello
	// and its acceptance of the job; 0: 30 s.
	LaunchTimeout time.Duration
	// AgentTimeout: an agent (or flexrun, seen from the agent) silent this
	// long counts as lost; 0: Job.LivenessTimeout under Run, else 10 s.
	AgentTimeout time.Duration
	MaxParallel  int    // agents started at once; 0: 64
	Executable   string // flexrun's own path (for srun without Prefix); "": os.Executable
	// BootstrapHost is the address the ranks on other hosts dial for the
	// bootstrap and PyTorch's MASTER_ADDR; "": for each host, the address
	// of this machine's interface that routes to it, else the address the
	// host saw the ssh connection come from.
	BootstrapHost string
}

func (r Remote) withDefaults() Remote {
	if r.SSH == "" {
		r.SSH = "ssh"
	}
	if r.Srun == "" {
		r.Srun = "srun"
	}
	if r.ConnectTimeout <= 0 {
		r.ConnectTimeout = DefaultConnectTimeout
	}
	if r.LaunchTimeout <= 0 {
		r.LaunchTimeout = DefaultLaunchTimeout
	}
	if r.AgentTimeout <= 0 {
		r.AgentTimeout = DefaultAgentTimeout
	}
	if r.MaxParallel <= 0 {
		r.MaxParallel = DefaultMaxParallel
	}
	if r.Executable == "" {
		r.Executable, _ = os.Executable()
	}
	return r
}

// agentArgv is the command that starts an agent with the given --node:
// fallback (flexrun's path there) without Prefix; with it a sh script that
// runs PREFIX/bin/flexrun when it is executable, else PREFIX/flexrun, so
// that --prefix may name the install directory or the bin directory.
func (r Remote) agentArgv(fallback, node string) []string {
	if r.Prefix == "" {
		return []string{fallback, "agent", "--node", node}
	}
	dir := strings.TrimSuffix(r.Prefix, "/")
	if dir == "" {
		dir = "/"
	}
	bin, direct := shellQuote(path.Join(dir, "bin", "flexrun")), shellQuote(path.Join(dir, "flexrun"))
	script := "if [ -x " + bin + " ]; then exec " + bin + " agent --node " + node +
		"; else exec " + direct + " agent --node " + node + "; fi"
	return []string{"sh", "-c", script}
}

// sshCommand is the command line that starts the agent of node on host:
//
//	ssh -T -x -o BatchMode=yes -o ConnectTimeout=10 [SSHArgs] -- HOST 'flexrun' agent --node N
//
// BatchMode makes a host that would ask for a password or a host key
// confirmation fail at once instead of hanging; everything else comes
// from the user's ssh configuration (~/.ssh/config, agents, ProxyJump).
func (r Remote) sshCommand(host string, node int) []string {
	secs := int((r.ConnectTimeout + time.Second - 1) / time.Second)
	args := []string{r.SSH, "-T", "-x", "-o", "BatchMode=yes", "-o", "ConnectTimeout=" + strconv.Itoa(secs)}
	args = append(args, r.SSHArgs...)
	argv := r.agentArgv("flexrun", strconv.Itoa(node))
	words := make([]string, len(argv))
	for i, w := range argv {
		words[i] = shellQuote(w)
	}
	return append(args, "--", host, strings.Join(words, " "))
}

// srunCommand starts one agent on each of hosts in one job step.
//
// The step gets --cpu-bind=none, not a --cpu-bind derived from the
// binding plan: srun binds the tasks it starts, and its one task per node
// here is the agent, which forks all of that node's ranks. A
// map_cpu/mask_cpu list would bind the agent, not the ranks (they would
// all inherit one mask), and flexrun cannot know a remote node's CPUs
// before that node's agent reports them. So the agent must see every CPU
// the step may use, and binds each rank itself from the plan (the same
// sched_setaffinity path as over ssh), inside Slurm's cgroup.
func (r Remote) srunCommand(hosts []string, exe string) []string {
	args := []string{r.Srun, "--ntasks-per-node=1", "--nodes=" + strconv.Itoa(len(hosts)),
		"--ntasks=" + strconv.Itoa(len(hosts)), "--nodelist=" + strings.Join(hosts, ","),
		"--kill-on-bad-exit=1", "--cpu-bind=none", "--label", "--input=all", "--job-name=flexrun-agents"}
	args = append(args, r.SrunArgs...)
	return append(args, r.agentArgv(exe, "-1")...)
}

// shellQuote quotes s for a POSIX shell (the remote login shell).
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SplitArgs splits a command-line fragment (--ssh-args) into words the way
// a POSIX shell would: blanks separate words, single quotes keep
// everything, double quotes keep everything but \" and \\, a backslash
// outside quotes escapes the next character.
func SplitArgs(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("%q: unclosed single quote", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("%q: unclosed double quote", s)
			}
			inWord = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("%q: trailing backslash", s)
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
