package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// remoteJob is the agents of one job, one per host other than flexrun's.
type remoteJob struct {
	cfg   Remote
	log   hclog.Logger
	links []*agentLink
	conns []*agentConn // in host order
}

// hostErrors collects per-host problems into one error that names each.
type hostErrors struct {
	mu   sync.Mutex
	errs map[string]string
}

func (h *hostErrors) add(host string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errs == nil {
		h.errs = map[string]string{}
	}
	if _, ok := h.errs[host]; !ok {
		h.errs[host] = err.Error()
	}
}

func (h *hostErrors) err(what string) error {
	if len(h.errs) == 0 {
		return nil
	}
	hosts := make([]string, 0, len(h.errs))
	for k := range h.errs {
		hosts = append(hosts, k)
	}
	sort.Strings(hosts)
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s; no rank was started", what, plural(len(hosts), "host"))
	for _, k := range hosts {
		fmt.Fprintf(&b, "\n  host %s: %s", k, h.errs[k])
	}
	return fmt.Errorf("%s", b.String())
}

// launchAgents starts an agent on every host in hosts and waits for each
// one's hello (at most LaunchTimeout). A host that cannot be reached, has
// no flexrun, refuses authentication or speaks another protocol version
// makes the whole launch fail, naming every such host; the agents that did
// start are stopped again.
func launchAgents(ctx context.Context, r Remote, hosts []Host, srun bool, exits chan<- rankExit, log hclog.Logger) (*remoteJob, error) {
	rj := &remoteJob{cfg: r, log: log}
	for i, h := range hosts {
		rj.conns = append(rj.conns, &agentConn{host: h, node: i, hello: make(chan agentHello, 1), reply: make(chan error, 1),
			exits: exits, ranks: map[int]*rankProc{}, exited: map[int]bool{}})
	}
	var problems hostErrors
	if srun {
		rj.launchSrun(ctx, &problems)
	} else {
		sem := make(chan struct{}, r.MaxParallel)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, a := range rj.conns {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				l, err := startLink("ssh to "+a.host.Name, r.sshCommand(a.host.Name, a.node), false, r.AgentTimeout, log,
					func(l *agentLink) { a.link, l.agents[a.node] = l, a })
				if err != nil {
					problems.add(a.host.Name, err)
					return
				}
				mu.Lock()
				rj.links = append(rj.links, l)
				mu.Unlock()
				if err := a.awaitHello(ctx, r.LaunchTimeout); err != nil {
					problems.add(a.host.Name, err)
				}
			})
		}
		wg.Wait()
	}
	if err := problems.err("cannot start flexrun's agent"); err != nil {
		rj.shutdown(time.Second)
		return nil, err
	}
	for _, l := range rj.links {
		go l.watch()
	}
	return rj, nil
}

// launchSrun starts every agent in one srun step and binds each agent, by
// the Slurm node name in its hello, to its host.
func (rj *remoteJob) launchSrun(ctx context.Context, problems *hostErrors) {
	names := make([]string, len(rj.conns))
	for i, a := range rj.conns {
		names[i] = a.host.Name
	}
	byName := map[string]*agentConn{}
	for _, a := range rj.conns {
		byName[a.host.Name] = a
	}
	bind := func(label int, data []byte) *agentConn {
		var h agentHello
		if json.Unmarshal(data, &h) != nil {
			return nil
		}
		a := byName[h.SlurmNode]
		if a == nil {
			a = byName[h.Host]
		}
		if a == nil {
			return nil
		}
		delete(byName, a.host.Name)
		a.node = label
		return a
	}
	l, err := startLink("srun", rj.cfg.srunCommand(names, rj.cfg.Executable), true, rj.cfg.AgentTimeout, rj.log, func(l *agentLink) {
		l.bind = bind
		for _, a := range rj.conns {
			a.link = l
		}
	})
	if err != nil {
		for _, a := range rj.conns {
			problems.add(a.host.Name, err)
		}
		return
	}
	rj.links = append(rj.links, l)
	var wg sync.WaitGroup
	for _, a := range rj.conns {
		wg.Go(func() {
			if err := a.awaitHello(ctx, rj.cfg.LaunchTimeout); err != nil {
				problems.add(a.host.Name, err)
			}
		})
	}
	wg.Wait()
}

// awaitHello waits for the agent's hello and checks it.
func (a *agentConn) awaitHello(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case h := <-a.hello:
		if h.Protocol != agentProtocol {
			return fmt.Errorf("flexrun agent at %s speaks agent protocol %d, this flexrun %d: install the same flexrun there", h.Exe, h.Protocol, agentProtocol)
		}
		a.mu.Lock()
		a.info = h
		a.mu.Unlock()
		return nil
	case <-a.link.done:
		return fmt.Errorf("%s", a.link.end)
	case <-t.C:
		a.link.kill()
		<-a.link.done
		return fmt.Errorf("no hello from flexrun agent within %v (%s)", timeout, a.link.end)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// prepare sends every agent its spec and waits for all to accept it.
func (rj *remoteJob) prepare(ctx context.Context, specs map[*agentConn]agentSpec) error {
	var problems hostErrors
	var wg sync.WaitGroup
	for _, a := range rj.conns {
		b, err := json.Marshal(specs[a])
		if err != nil {
			return err
		}
		if err := a.link.fw.send(frame{Kind: kSpec, Node: a.node, Rank: -1, Data: b}); err != nil {
			problems.add(a.host.Name, fmt.Errorf("send job: %w", err))
			continue
		}
		wg.Go(func() {
			t := time.NewTimer(rj.cfg.LaunchTimeout)
			defer t.Stop()
			select {
			case err := <-a.reply:
				if err != nil {
					problems.add(a.host.Name, err)
				}
			case <-t.C:
				problems.add(a.host.Name, fmt.Errorf("agent did not accept the job within %v", rj.cfg.LaunchTimeout))
			case <-ctx.Done():
				problems.add(a.host.Name, ctx.Err())
			}
		})
	}
	wg.Wait()
	return problems.err("cannot run the job")
}

// start tells every agent to start its ranks.
func (rj *remoteJob) start() {
	for _, a := range rj.conns {
		a.mu.Lock()
		a.goSent = true
		a.mu.Unlock()
		_ = a.link.fw.send(frame{Kind: kGo, Node: a.node, Rank: -1})
	}
}

// shutdown closes every link, each waiting at most grace.
func (rj *remoteJob) shutdown(grace time.Duration) {
	var wg sync.WaitGroup
	for _, l := range rj.links {
		wg.Go(func() { l.close(grace) })
	}
	wg.Wait()
}

// routeAddr is the address of this machine's interface that routes to
// host, found without sending anything (a UDP socket's connect).
func routeAddr(host string, resolve func(string) ([]string, error)) (string, error) {
	ip := net.ParseIP(host)
	if ip == nil && resolve != nil {
		addrs, err := resolve(host)
		if err != nil {
			return "", err
		}
		for _, a := range addrs {
			if ip = net.ParseIP(a); ip != nil && ip.To4() != nil {
				break
			}
		}
	}
	if ip == nil {
		return "", fmt.Errorf("cannot resolve %s", host)
	}
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: ip, Port: 9})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
