package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/flexlink/flexlink/launcher"
)

// runAgent is `flexrun agent`: the far end of an ssh or srun launch, not
// meant to be run by hand (but `ssh HOST flexrun agent --check` prints the
// hello and is a quick way to see that a host is ready). Its protocol is
// described in package launcher.
func runAgent(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("flexrun agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := fs.Int("node", -1, "this agent's index in the job (-1: SLURM_PROCID)")
	check := fs.Bool("check", false, "say hello (host, GPUs, protocol) and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "flexrun agent: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// A broken stdout (flexrun gone) must not kill the agent before it
	// has torn its ranks down. Notify, not Ignore: an ignored signal would
	// stay ignored in the ranks.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	return launcher.RunAgent(ctx, launcher.AgentConfig{
		In: stdin, Out: stdout, Stderr: stderr, Node: *node, Check: *check, Signals: sigs,
	})
}
