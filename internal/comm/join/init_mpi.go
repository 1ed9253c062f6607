//go:build mpi

package join

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"strings"

	mpi "github.com/sbromberger/gompi"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/settings"
)

// mpiCardLen is the size of the broadcast that carries rank 0's bootstrap
// address and the job secret (MPI_Bcast needs one size on every rank).
const mpiCardLen = 512

// initMPI joins a job started by mpirun, in a binary built with -tags mpi:
// MPI starts (MPI_Init through gompi), rank 0 starts the bootstrap server
// on a free port and a fresh random secret, MPI_Bcast hands its address
// and the secret to every rank, and all join it over TCP. The secret never
// leaves the job's processes but through MPI. Leaving the job (closing the
// world communicator) ends with MPI_Barrier and MPI_Finalize.
func initMPI(ctx context.Context, env settings.Env, getenv func(string) (string, bool), host string, build Build) error {
	mpi.Start(false)
	world := mpi.NewCommunicator(nil)
	me, n := mpi.WorldRank(), mpi.WorldSize()
	barrier := func() { world.Barrier() }
	finish := func() { mpi.Stop() }
	jobID := "mpi-"
	if w, err := readOMPI(getenv); err == nil {
		jobID += w.jobID
	}
	card := make([]byte, mpiCardLen)
	var srv *bootstrap.Server
	var serveErr error
	if me == 0 {
		secret := make([]byte, 32)
		if _, serveErr = rand.Read(secret); serveErr == nil {
			liveness, _ := env.Duration("FLEXLINK_LIVENESS_TIMEOUT") // a bad value fails the dial below
			var pr ports.Range                                       // FLEXLINK_PORT_RANGE: the server takes its first free port
			if pr, serveErr = env.Ports(); serveErr == nil {
				srv, serveErr = bootstrap.NewServer(bootstrap.ServerConfig{Addr: ":0", Ports: pr, Size: n, Secret: secret, JobID: jobID, Logger: NewLogger(env, host, 0), PeerTimeout: liveness})
			}
		}
		text := "error " + fmt.Sprint(serveErr)
		if serveErr == nil {
			_, port, _ := net.SplitHostPort(srv.Addr())
			text = fmt.Sprintf("ok %s %x", net.JoinHostPort(reachableAddr(env.String("FLEXLINK_SOCKET_IFNAME")), port), secret)
		}
		copy(card, text)
	}
	world.BcastBytes(card, 0)
	f := strings.Fields(string(bytes.TrimRight(card, "\x00")))
	if len(f) != 3 || f[0] != "ok" {
		return fmt.Errorf("rank %d on %s (mpirun -tags mpi): rank 0 could not serve the bootstrap: %s", me, host, strings.Join(f, " "))
	}
	var secret []byte
	if _, err := fmt.Sscanf(f[2], "%x", &secret); err != nil {
		return fmt.Errorf("rank %d on %s: bad bootstrap card from rank 0: %w", me, host, err)
	}
	// On an error MPI is left running: finishing it is collective, and the
	// other ranks may be stuck; mpirun ends the job when this rank exits.
	return joinServed(ctx, env, host, servedJob{
		launcher: "mpirun", rank: me, size: n, dial: f[1], jobID: jobID, secret: secret, barrier: barrier, finish: finish,
	}, srv, build)
}

// reachableAddr is the address rank 0 offers the others: the first IPv4
// address of an up interface that FLEXLINK_SOCKET_IFNAME allows (spec:
// comma-separated name prefixes, "^" to exclude them, "=" for exact
// names), a non-loopback one first; 127.0.0.1 when there is none.
func reachableAddr(spec string) string {
	exclude := strings.HasPrefix(spec, "^")
	spec = strings.TrimPrefix(spec, "^")
	exact := strings.HasPrefix(spec, "=")
	spec = strings.TrimPrefix(spec, "=")
	allowed := func(name string) bool {
		if spec == "" {
			return true
		}
		for _, p := range strings.Split(spec, ",") {
			if p = strings.TrimSpace(p); p != "" && (name == p || !exact && strings.HasPrefix(name, p)) {
				return !exclude
			}
		}
		return exclude
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	loop := ""
	for _, f := range ifs {
		if f.Flags&net.FlagUp == 0 || !allowed(f.Name) {
			continue
		}
		addrs, _ := f.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				if f.Flags&net.FlagLoopback == 0 {
					return ipn.IP.String()
				}
				if loop == "" {
					loop = ipn.IP.String()
				}
			}
		}
	}
	if loop != "" {
		return loop
	}
	return "127.0.0.1"
}
