// Command reporter is one rank of a flexrun job whose ranks report how a
// communicator ended as flexlink's libnccl does (join.DialReporter, one
// put of comm.EncodeEnd per report, then the goodbye), following a
// script, for flexrun's tests: one process that reports several times
// (a stall, then a later, more specific cause), and a reporter killed in
// the middle of its report.
//
// Usage: reporter -dir DIR -plan "0=step,step;1=step;..." where the
// rank's steps run in order (a rank with no plan exits 0):
//
//	stall:N:B      report a timeout in AllReduce #N, waiting for job rank B
//	timeout:N:B    the same (a call that failed at its timeout)
//	resumed:N      report that AllReduce #N, reported waiting, completed
//	mismatch:N:R   report a mismatch in AllReduce #N, rank R having called AllGather
//	peerlost:N     report a lost peer in AllReduce #N
//	peerlost:N:R   the same, the communicator ended by job rank R (its
//	               words name R as internal/comm's do: "communicator
//	               ... ended by rank R of S (world rank R) on HOST: ...")
//	killed-mid-report  start a reporter child that joins the job's store as
//	               this rank and is killed (SIGKILL) in the middle of a
//	               large put; wait for it to die
//	touch:NAME     create DIR/NAME
//	pid:NAME       write this process's pid into DIR/NAME
//	gone:NAME      wait (30 s at most) until the process whose pid is in
//	               DIR/NAME has ended and been reaped by flexrun
//	wait:NAME      wait (30 s at most) until DIR/NAME exists
//	hang           wait to be terminated (2 minutes at most)
//	exit:S         exit with status S
//
// Every report is on communicator "nccl@test/w", whose members are every
// rank of the job.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/comm/join"
	"github.com/flexlink/flexlink/internal/settings"
)

const commName = "nccl@test/w"

func main() {
	dir := flag.String("dir", "", "directory of the ranks' marker files")
	plan := flag.String("plan", "", "each rank's steps")
	child := flag.Bool("killed-mid-report-child", false, "run as the reporter child killed mid-report")
	flag.Parse()
	env := settings.OS()
	rank, ok := join.LauncherRank(env)
	if !ok {
		fail("not started by flexrun")
	}
	if *child {
		killedMidReport(env)
		return
	}
	for _, step := range steps(*plan, rank) {
		err := run(env, rank, *dir, step)
		var re reportError
		switch {
		case errors.As(err, &re):
			// Reports are best effort, as libnccl's: the rank goes on.
			fmt.Fprintf(os.Stderr, "reporter: rank %d: %s: %v\n", rank, step, err)
		case err != nil:
			fail(fmt.Sprintf("rank %d: %s: %v", rank, step, err))
		}
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "reporter:", msg)
	os.Exit(2)
}

// steps are rank's steps in plan.
func steps(plan string, rank int) []string {
	for _, p := range strings.Split(plan, ";") {
		r, s, ok := strings.Cut(p, "=")
		if ok && r == strconv.Itoa(rank) {
			return strings.Split(s, ",")
		}
	}
	return nil
}

func run(env settings.Env, rank int, dir, step string) error {
	f := strings.Split(step, ":")
	arg := func(i int) int {
		if i >= len(f) {
			fail("step " + step + ": too few fields")
		}
		n, err := strconv.Atoi(f[i])
		if err != nil {
			fail("step " + step + ": " + err.Error())
		}
		return n
	}
	size, err := env.Int("FLEXLINK_WORLD_SIZE")
	if err != nil {
		return err
	}
	members := make([]int, size)
	for i := range members {
		members[i] = i
	}
	call := func(n int) string { return "AllReduce #" + strconv.Itoa(n) }
	switch f[0] {
	case "stall", "timeout":
		n, b := arg(1), arg(2)
		return report(env, comm.EndReport{Kind: "timeout", InCall: call(n), Members: members, Behind: []int{b},
			Text: fmt.Sprintf("rank %d of %d: %s did not complete: rank %d has not called %s", rank, size, call(n), b, call(n))})
	case "resumed":
		return report(env, comm.EndReport{Kind: "resumed", InCall: call(arg(1)), Members: members})
	case "mismatch":
		n, other := arg(1), arg(2)
		return report(env, comm.EndReport{Kind: "mismatch", InCall: call(n), Members: members,
			Text: fmt.Sprintf("rank %d: AllReduce #%d: collective mismatch: rank %d called allreduce count=1 int64 (call #%d), rank %d called allgather count=1 int64 (call #%d)", rank, n, rank, n, other, n)})
	case "peerlost":
		text := fmt.Sprintf("rank %d: %s: peer lost", rank, call(arg(1)))
		if len(f) > 2 {
			by := arg(2)
			text = fmt.Sprintf("ncclAllReduce rank %d of %d: communicator w.s0c1 ended by rank %d of %d (world rank %d) on %s: ncclCommAbort: aborted (local error: shm link to rank %d: control socket closed: peer lost)",
				rank, size, by, size, by, host(), by)
		}
		return report(env, comm.EndReport{Kind: "peer-lost", InCall: call(arg(1)), Members: members, Text: text})
	case "killed-mid-report":
		cmd := exec.Command(os.Args[0], "-killed-mid-report-child")
		cmd.Stderr = os.Stderr
		err := cmd.Run()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			return fmt.Errorf("the reporter child ended with %v, want SIGKILL", err)
		}
		return nil
	case "touch":
		return os.WriteFile(filepath.Join(dir, f[1]), nil, 0o644)
	case "wait":
		return waitFile(filepath.Join(dir, f[1]), 30*time.Second)
	case "pid":
		path := filepath.Join(dir, f[1])
		if err := os.WriteFile(path+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return err
		}
		return os.Rename(path+".tmp", path) // whole when it appears
	case "gone":
		return waitGone(filepath.Join(dir, f[1]), 30*time.Second)
	case "hang":
		<-time.After(2 * time.Minute)
		return fmt.Errorf("still running 2 minutes later")
	case "exit":
		os.Exit(arg(1))
	}
	return fmt.Errorf("no such step")
}

// reportError is a report that could not be made.
type reportError struct{ error }

// report publishes e as this rank's, as libnccl does: join the job's
// store as a reporter, put, say goodbye.
func report(env settings.Env, e comm.EndReport) error {
	if err := publish(env, e); err != nil {
		return reportError{err}
	}
	return nil
}

func publish(env settings.Env, e comm.EndReport) error {
	e.Comm, e.ClosedBy = commName, -1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := join.DialReporter(ctx, env, hclog.NewNullLogger())
	if err != nil {
		return err
	}
	key, value := comm.EncodeEnd(rep.Rank, e)
	perr := rep.Store.Put(ctx, key, value)
	if err := rep.Store.Close(); err != nil {
		return err
	}
	if perr != nil && !strings.Contains(perr.Error(), "already set") {
		return perr // (a second report under the key is refused, and heard)
	}
	return nil
}

// killedMidReport joins the job's store as this rank's reporter, starts a
// put of 48 MiB and kills itself once a MiB of it has been written to
// the connection: the server has a frame's header and part of its body
// when the connection ends.
func killedMidReport(env settings.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := join.DialReporter(ctx, env, hclog.NewNullLogger())
	if err != nil {
		fail("child: " + err.Error())
	}
	before := written()
	go func() { _ = rep.Store.Put(ctx, "end/"+commName, make([]byte, 48<<20)) }()
	for written() < before+1<<20 {
		if ctx.Err() != nil {
			fail("child: the put did not start within 10 s")
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// written is the bytes this process has written by system calls
// (/proc/self/io's wchar: sockets included).
func written() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		fail("child: " + err.Error())
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	fail("child: no wchar in /proc/self/io")
	return 0
}

// waitFile waits until path exists, at most d.
func waitFile(path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", path, d)
		}
		<-tick.C
	}
}

// waitGone waits, at most d, until the process whose pid path holds has
// ended and its parent (flexrun) has reaped it: signal 0 finds no such
// process (a zombie not reaped yet still takes it).
func waitGone(path string, d time.Duration) error {
	if err := waitFile(path, d); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still there after %v", pid, d)
		}
		<-tick.C
	}
}

// host is this host's name, as a rank's errors give it.
func host() string {
	h, err := os.Hostname()
	if err != nil {
		return "?"
	}
	return h
}
