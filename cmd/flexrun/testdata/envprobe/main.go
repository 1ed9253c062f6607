// Command envprobe is the rank program of flexrun's tests. Its first
// argument picks what it does:
//
//	env [ARGS...]      print one JSON line: rank, pid, args, environment
//	join               join the bootstrap store named by the environment,
//	                   all-gather the ranks and print them ("joined R: 0 1 ...")
//	lines N            write N numbered lines to stdout and to stderr, each
//	                   line in several small writes
//	stdin              print what stdin held ("rank R stdin "quoted"")
//	fail R CODE        join the bootstrap, print "pid RANK PID", wait for all
//	                   ranks to print theirs; then rank R exits with CODE (or
//	                   kills itself with SIGKILL when CODE is "kill"), the
//	                   others wait (60 s at most)
//	hang DIR           print "pid RANK PID" once ready; on SIGTERM write
//	                   DIR/term.RANK and exit 0; on SIGUSR1 print
//	                   "usr1 RANK"; otherwise wait (60 s at most)
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/settings"
)

func main() {
	if len(os.Args) < 2 {
		fatal(fmt.Errorf("usage: envprobe MODE [ARGS...]"))
	}
	env := settings.OS()
	rank, _ := env.Int("FLEXLINK_RANK")
	args := os.Args[2:]
	switch os.Args[1] {
	case "env":
		vars := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		b, err := json.Marshal(map[string]any{"rank": rank, "pid": os.Getpid(), "args": args, "env": vars})
		if err != nil {
			fatal(err)
		}
		fmt.Printf("%s\n", b)
	case "join":
		st := join(env, rank)
		defer st.Close()
		all, err := st.AllGather(context.Background(), []byte(strconv.Itoa(rank)))
		if err != nil {
			fatal(err)
		}
		fmt.Printf("joined %d: %s\n", rank, joinBytes(all))
	case "lines":
		n, _ := strconv.Atoi(args[0])
		for i := range n {
			line := fmt.Sprintf("rank %d line %d %s", rank, i, strings.Repeat(strconv.Itoa(rank%10), 40))
			for _, w := range []io.Writer{os.Stdout, os.Stderr} {
				// Three writes per line: a forwarder that passed writes
				// through as they come would interleave ranks mid-line.
				third := len(line) / 3
				fmt.Fprint(w, line[:third])
				fmt.Fprint(w, line[third:2*third])
				fmt.Fprint(w, line[2*third:]+"\n")
			}
		}
	case "stdin":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			fatal(err)
		}
		fmt.Printf("rank %d stdin %q\n", rank, b)
	case "fail":
		failMode(env, rank, args)
	case "hang":
		hang(rank, args[0])
	default:
		fatal(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
}

func failMode(env settings.Env, rank int, args []string) {
	who, _ := strconv.Atoi(args[0])
	st := join(env, rank)
	fmt.Printf("pid %d %d\n", rank, os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.Barrier(ctx); err != nil {
		fatal(err)
	}
	if rank != who {
		<-time.After(60 * time.Second)
		os.Exit(0)
	}
	if args[1] == "kill" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		<-time.After(10 * time.Second)
	}
	code, _ := strconv.Atoi(args[1])
	os.Exit(code)
}

func hang(rank int, dir string) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1)
	fmt.Printf("pid %d %d\n", rank, os.Getpid())
	deadline := time.After(60 * time.Second)
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGUSR1 {
				fmt.Printf("usr1 %d\n", rank)
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, "term."+strconv.Itoa(rank)), []byte("TERM"), 0o644); err != nil {
				fatal(err)
			}
			os.Exit(0)
		case <-deadline:
			os.Exit(0)
		}
	}
}

// join dials the bootstrap store with the launcher's variables.
func join(env settings.Env, rank int) bootstrap.Store {
	size, _ := env.Int("FLEXLINK_WORLD_SIZE")
	secret, err := hex.DecodeString(env.String("FLEXLINK_JOB_SECRET"))
	if err != nil {
		fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := bootstrap.Dial(ctx, bootstrap.DialConfig{
		Addr: env.String("FLEXLINK_BOOTSTRAP"), Rank: rank, Size: size,
		Secret: secret, JobID: env.String("FLEXLINK_JOB_ID"),
	})
	if err != nil {
		fatal(err)
	}
	return st
}

func joinBytes(all [][]byte) string {
	parts := make([]string, len(all))
	for i, b := range all {
		parts[i] = string(b)
	}
	return strings.Join(parts, " ")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "envprobe:", err)
	os.Exit(99)
}
