package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// prepare accepts flexrun's spec: it picks the working directory and
// finds the program, so that a host where the job cannot run says so
// before any rank anywhere has started.
func (a *agent) prepare(data []byte) error {
	if a.spec != nil {
		return errors.New("second job spec")
	}
	var spec agentSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("job spec: %w", err)
	}
	if len(spec.Ranks) == 0 {
		return errors.New("job spec: no ranks for this host")
	}
	env := append([]string(nil), a.cfg.Environ...)
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = setEnv(env, k, v)
	}
	if spec.PathPrefix != "" {
		if st, err := os.Stat(spec.PathPrefix); (err != nil || !st.IsDir()) && filepath.Base(spec.PathPrefix) == "bin" {
			spec.PathPrefix = filepath.Dir(spec.PathPrefix) // --prefix named the directory holding flexrun
		}
		path, _ := lookupEnv(env, "PATH")
		env = setEnv(env, "PATH", spec.PathPrefix+string(os.PathListSeparator)+path)
	}
	spec.Env = env
	if st, err := os.Stat(spec.Dir); err == nil && st.IsDir() {
		a.dir = spec.Dir
	} else if spec.Dir != "" {
		wd, _ := os.Getwd()
		note := fmt.Sprintf("working directory %s does not exist on this host; ranks start in %s", spec.Dir, wd)
		_ = a.fw.send(frame{Kind: kNote, Node: a.node, Rank: -1, Data: []byte(note)})
	}
	path, _ := lookupEnv(env, "PATH")
	prog, err := findProgram(spec.Program, a.dir, path)
	if err != nil {
		return err
	}
	a.spec, a.path = &spec, prog
	var report func(string)
	if spec.ReportBindings {
		report = func(line string) { _ = a.fw.send(frame{Kind: kBind, Node: a.node, Rank: -1, Data: []byte(line)}) }
	}
	if a.binds, err = bindRanks(spec.BindTo, env, spec.Ranks, report); err != nil {
		return err
	}
	for _, p := range spec.Ranks {
		if p.Rank == spec.StdinRank {
			// Open now: stdin frames may come before "go".
			r, w, err := os.Pipe()
			if err != nil {
				return fmt.Errorf("stdin pipe of rank %d: %w", p.Rank, err)
			}
			a.stdinR, a.stdin = r, make(chan []byte, 64)
			go feed(w, a.stdin)
		}
	}
	return nil
}

// findProgram resolves prog as a rank would start it: a name with a slash
// relative to dir, a bare name on path.
func findProgram(prog, dir, path string) (string, error) {
	if strings.Contains(prog, "/") {
		p := prog
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("program %s: %w", prog, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, prog)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("program %s: not found on PATH (%s)", prog, path)
}

func isExecutable(p string) error {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("%s is a directory", p)
	case st.Mode()&0o111 == 0:
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// start starts the host's ranks. On an error the ranks already started
// are torn down by the caller.
func (a *agent) start() error {
	a.sp = newSpawner()
	a.exits = make(chan rankExit, len(a.spec.Ranks))
	// Exits go to flexrun in the order the ranks ended (see reaper), also
	// when starting fails half way.
	reap := newReaper(a.exits)
	defer reap.start()
	stdin := a.stdinR
	for i, p := range a.spec.Ranks {
		rs := rankSpec{
			path: a.path, args: a.spec.Args, env: rankEnv(a.spec.Env, a.spec.Job, p), dir: a.dir, p: p,
			rankOutput: rankOutput{relay: a.relay(p.Rank), maxLine: MaxLine}, cpus: a.binds[p.Rank].CPUs,
		}
		if p.Rank == a.spec.StdinRank {
			rs.stdin = stdin
		}
		rp, err := startRank(a.sp, rs)
		if p.Rank == a.spec.StdinRank {
			stdin.Close()
		}
		if err != nil {
			return err
		}
		a.ranks = append(a.ranks, rp)
		a.alive++
		a.undrained++
		_ = a.fw.send(frame{Kind: kStart, Node: a.node, Rank: p.Rank, Data: []byte(strconv.Itoa(rp.pid))})
		reap.add(i, rp.cmd)
	}
	return nil
}

// relay returns the function that sends one output stream of rank to
// flexrun, in frames of at most maxChunk bytes, as it is read. After a
// send fails (flexrun is gone) it reads on and discards, so the rank never
// blocks on a full pipe before it is torn down.
func (a *agent) relay(rank int) func(int, io.Reader) {
	return func(stream int, r io.Reader) {
		kind := kOut
		if stream == 1 {
			kind = kErr
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_ = a.fw.sendChunks(kind, a.node, rank, buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
}

// feed writes stdin chunks to w until the channel closes. Chunks queue
// without bound, so a rank that does not read its stdin never stalls the
// agent's event loop.
func feed(w *os.File, in <-chan []byte) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var queue [][]byte
	closed := false
	go func() {
		for b := range in {
			mu.Lock()
			queue = append(queue, b)
			mu.Unlock()
			cond.Signal()
		}
		mu.Lock()
		closed = true
		mu.Unlock()
		cond.Signal()
	}()
	broken := false
	for {
		mu.Lock()
		for len(queue) == 0 && !closed {
			cond.Wait()
		}
		if len(queue) == 0 {
			mu.Unlock()
			w.Close()
			return
		}
		b := queue[0]
		queue = queue[1:]
		mu.Unlock()
		if !broken {
			_, err := w.Write(b)
			broken = err != nil
		}
	}
}
