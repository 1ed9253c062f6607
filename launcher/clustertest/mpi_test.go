package clustertest

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mpirun returns the mpirun command line for np ranks, as root allows.
func mpirun(t *testing.T, np string, args ...string) ([]string, []string) {
	t.Helper()
	if _, err := exec.LookPath("mpirun"); err != nil {
		missing(t, "OpenMPI", "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	env := []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}
	// Loopback only: the bootstrap and the tcp links (FLEXLINK_SOCKET_IFNAME),
	// and OpenMPI's own traffic.
	argv := append([]string{"mpirun", "--oversubscribe", "-np", np, "--mca", "btl", "self,vader", "--mca", "oob_tcp_if_include", "lo",
		"-x", "FLEXLINK_SOCKET_IFNAME=lo"}, args...)
	return argv, env
}

func checkTrain(t *testing.T, p *proc) {
	t.Helper()
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, p.out.String(), p.err.String())
	}
	for _, want := range []string{"epoch  3", "weights identical on all 4 ranks", "matches single-process training"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, p.out.String())
		}
	}
	if strings.Contains(p.err.String(), "ERROR") {
		t.Errorf("errors logged:\n%s", p.err.String())
	}
}

// TestMpirunTagMPI: a binary built with -tags mpi bootstraps through MPI
// (rank 0's address and a fresh secret by MPI_Bcast).
func TestMpirunTagMPI(t *testing.T) {
	if st.bins.trainMPI == "" {
		missing(t, "OpenMPI", st.bins.mpiErr)
	}
	argv, env := mpirun(t, "4", st.bins.trainMPI, "-epochs", "3")
	checkTrain(t, run(t, env, argv...))
}

// TestMpirunEnv: without the tag, the ranks read OMPI_COMM_WORLD_* and
// rank 0 serves the bootstrap where FLEXLINK_BOOTSTRAP says.
func TestMpirunEnv(t *testing.T) {
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	argv, env := mpirun(t, "4", "-x", "FLEXLINK_BOOTSTRAP=127.0.0.1:"+strconv.Itoa(ports[0]), "-x", "FLEXLINK_KEY_FILE="+t.TempDir()+"/key", st.bins.train, "-epochs", "3")
	checkTrain(t, run(t, env, argv...))
}

// TestMpirunEnvWithoutBootstrap: the error says what to pass.
func TestMpirunEnvWithoutBootstrap(t *testing.T) {
	argv, env := mpirun(t, "2", st.bins.train, "-epochs", "1")
	p := run(t, env, argv...)
	code := p.wait(t, 60*time.Second)
	want := "without FLEXLINK_BOOTSTRAP: pass -x FLEXLINK_BOOTSTRAP=HOST:PORT"
	if code == 0 || !strings.Contains(p.err.String(), want) {
		t.Errorf("exit %d, stderr:\n%s\nwant a failure saying %q", code, p.err.String(), want)
	}
}
