package clustertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// slurm is a one-node Slurm cluster (munged, slurmctld, slurmd) run from
// a temporary directory, without systemd or cgroups.
type slurm struct {
	dir  string
	conf string // SLURM_CONF
	node string
}

func testSlurm(t *testing.T) *slurm {
	t.Helper()
	return st.slurm.get(t, startSlurm)
}

// env is what Slurm's client commands need.
func (s *slurm) env() []string { return []string{"SLURM_CONF=" + s.conf} }

const slurmConf = `ClusterName=flextest
SlurmctldHost={{node}}(127.0.0.1)
SlurmctldPort={{ctldport}}
SlurmdPort={{dport}}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={{dir}}/munge.socket
CredType=cred/munge
StateSaveLocation={{dir}}/state
SlurmdSpoolDir={{dir}}/spool
SlurmctldPidFile={{dir}}/slurmctld.pid
SlurmdPidFile={{dir}}/slurmd.pid
SlurmctldLogFile={{dir}}/slurmctld.log
SlurmdLogFile={{dir}}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
SlurmdParameters=config_overrides
ReturnToService=2
NodeName={{node}} NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={{node}} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
`

func startSlurm() (*slurm, func(), string, error) {
	if os.Geteuid() != 0 {
		return nil, nil, "Slurm: the Slurm tests run slurmd as root", nil
	}
	for _, p := range []string{"munged", "slurmctld", "slurmd", "srun", "salloc", "sbatch", "sinfo"} {
		if _, err := exec.LookPath(p); err != nil {
			return nil, nil, "Slurm: " + p + " not found (apt-get install slurmctld slurmd slurm-client munge)", nil
		}
	}
	node, _ := os.Hostname()
	if _, err := net.LookupHost(node); err != nil {
		return nil, nil, "Slurm: this host's name " + node + " does not resolve (srun tasks dial the first node by name)", nil
	}
	dir, err := os.MkdirTemp("", "flexlink-slurm-")
	if err != nil {
		return nil, nil, "", err
	}
	os.Chmod(dir, 0o755) // munged wants its socket's directory searchable
	s := &slurm{dir: dir, conf: filepath.Join(dir, "slurm.conf"), node: node}
	var daemons []*exec.Cmd
	stop := func() {
		// Jobs a failed test left behind go first, while slurmctld can
		// still cancel them (this cluster and its jobs are the tests').
		if len(daemons) == 3 {
			scancel := exec.Command("scancel", "--full", "--user", "root")
			scancel.Env = append(os.Environ(), s.env()...)
			scancel.Run()
			poll(10*time.Second, func() bool {
				q := exec.Command("squeue", "--noheader")
				q.Env = scancel.Env
				out, err := q.Output()
				return err != nil || strings.TrimSpace(string(out)) == ""
			})
		}
		for _, d := range daemons {
			d.Process.Kill()
			d.Wait()
		}
		os.RemoveAll(dir)
	}
	fail := func(err error) (*slurm, func(), string, error) {
		logs := ""
		for _, f := range []string{"munged.log", "slurmctld.log", "slurmd.log"} {
			b, _ := os.ReadFile(filepath.Join(dir, f))
			logs += "\n" + f + ":\n" + string(b)
		}
		stop()
		return nil, nil, "", fmt.Errorf("start Slurm: %w%s", err, logs)
	}
	key := make([]byte, 1024)
	if f, err := os.Open("/dev/urandom"); err == nil {
		f.Read(key)
		f.Close()
	}
	for _, d := range []string{"state", "spool"} {
		os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o600); err != nil {
		return fail(err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return fail(err)
	}
	conf := strings.NewReplacer("{{node}}", node, "{{dir}}", dir, "{{ctldport}}", strconv.Itoa(ports[0]), "{{dport}}", strconv.Itoa(ports[1])).Replace(slurmConf)
	if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
		return fail(err)
	}
	for _, argv := range [][]string{
		{"munged", "-F", "--force", "--socket=" + dir + "/munge.socket", "--key-file=" + dir + "/munge.key",
			"--log-file=" + dir + "/munged.log", "--pid-file=" + dir + "/munged.pid", "--seed-file=" + dir + "/munged.seed"},
		{"slurmctld", "-D", "-f", s.conf},
		{"slurmd", "-D", "-f", s.conf},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), s.env()...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fail(err)
		}
		daemons = append(daemons, cmd)
		if argv[0] == "munged" && !poll(10*time.Second, func() bool { _, err := os.Stat(dir + "/munge.socket"); return err == nil }) {
			return fail(fmt.Errorf("munged made no socket within 10 s"))
		}
	}
	idle := regexp.MustCompile(`(?m)^\S+\s+up\s+\S+\s+1\s+idle`)
	var out string
	if !poll(30*time.Second, func() bool {
		cmd := exec.Command("sinfo")
		cmd.Env = append(os.Environ(), s.env()...)
		b, _ := cmd.CombinedOutput()
		out = string(b)
		return idle.MatchString(out)
	}) {
		return fail(fmt.Errorf("node not idle within 30 s; sinfo:\n%s", out))
	}
	return s, stop, "", nil
}

// freePorts finds n free TCP ports on the loopback interface.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// TestSrunWithoutFlexrun: `srun -n 4 ./train`: rank.Init reads the step's
// SLURM_* variables and rank 0 serves the bootstrap.
func TestSrunWithoutFlexrun(t *testing.T) {
	s := testSlurm(t)
	key := filepath.Join(t.TempDir(), "job.key")
	p := run(t, append(s.env(), "FLEXLINK_KEY_FILE="+key), "srun", "-n", "4", st.bins.train, "-epochs", "3")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
	}
	for _, want := range []string{"epoch  3", "weights identical on all 4 ranks", "matches single-process training"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, p.out.String())
		}
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file %s: %v, mode %v; want it created with mode 0600", key, err, st.Mode().Perm())
	}
	// Each rank saw its place from Slurm: the spin probe prints it.
	p = run(t, append(s.env(), "FLEXLINK_KEY_FILE="+key), "srun", "-n", "3", st.bins.spin, "-iters", "2", "-env", "SLURM_PROCID,SLURM_LOCALID")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.err.String())
	}
	lines := joinedRE.FindAllStringSubmatch(p.out.String(), -1)
	if len(lines) != 3 {
		t.Fatalf("joined lines %q, want 3", lines)
	}
	for _, l := range lines {
		if want := " SLURM_PROCID=" + l[1] + " SLURM_LOCALID=" + l[1]; l[2] != "3" || l[5] != want {
			t.Errorf("line %q: want world 3 and%s", l[0], want)
		}
	}
}

// TestSrunSecretMismatch: tasks that derive different secrets (a key file
// not shared) fail with an error that says where the secret comes from.
func TestSrunSecretMismatch(t *testing.T) {
	s := testSlurm(t)
	dir := t.TempDir()
	script := fmt.Sprintf(`FLEXLINK_KEY_FILE=%s/key.$SLURM_PROCID exec %s -iters 1`, dir, st.bins.spin)
	p := run(t, append(s.env(), "FLEXLINK_BOOTSTRAP_TIMEOUT=3s"), "srun", "-n", "2", "sh", "-c", script)
	code := p.wait(t, 60*time.Second)
	if code == 0 || !strings.Contains(p.err.String(), "job secret derived from "+dir+"/key.1: every host must hold the same file") {
		t.Errorf("exit %d, stderr:\n%s\nwant a failure naming the key file", code, p.err.String())
	}
}

// TestSallocFlexrun: flexrun inside an allocation takes its hosts and
// slots from Slurm and starts its agents with srun: the ranks run in the
// agents' job step.
func TestSallocFlexrun(t *testing.T) {
	s := testSlurm(t)
	p := run(t, s.env(), "salloc", "-n", "4", st.bins.flexrun, st.bins.spin, "-iters", "3", "-env", "SLURM_STEP_ID,SLURM_JOB_NAME,FLEXLINK_LOCAL_SIZE")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
	}
	lines := joinedRE.FindAllStringSubmatch(p.out.String(), -1)
	if len(lines) != 4 {
		t.Fatalf("joined lines %q, want 4 (the allocation's tasks)", lines)
	}
	for _, l := range lines {
		if l[2] != "4" || !strings.HasPrefix(l[5], " SLURM_STEP_ID=") || !strings.HasSuffix(l[5], " SLURM_JOB_NAME=flexrun-agents FLEXLINK_LOCAL_SIZE=4") {
			t.Errorf("line %q: want world 4, inside the agents' step (flexrun-agents), local size 4", l[0])
		}
	}
}

// TestSbatchFlexrun: the same from a batch script; the job's output file
// holds the training's result.
func TestSbatchFlexrun(t *testing.T) {
	s := testSlurm(t)
	out := filepath.Join(t.TempDir(), "job.out")
	p := run(t, s.env(), "sbatch", "--parsable", "-n", "4", "-o", out, "--wrap", st.bins.flexrun+" "+st.bins.train+" -epochs 2; echo flexrun exit $?")
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("sbatch: exit %d, stderr:\n%s", code, p.err.String())
	}
	var text string
	if !poll(60*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		text = string(b)
		return strings.Contains(text, "flexrun exit")
	}) {
		t.Fatalf("batch job %s did not finish within 60 s; output so far:\n%s", strings.TrimSpace(p.out.String()), text)
	}
	for _, want := range []string{"weights identical on all 4 ranks", "matches single-process training", "flexrun exit 0"} {
		if !strings.Contains(text, want) {
			t.Errorf("job output lacks %q:\n%s", want, text)
		}
	}
}
