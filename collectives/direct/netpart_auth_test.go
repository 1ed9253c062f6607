package direct

import (
	"context"
	"fmt"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/collectives/staged"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/hello"
	"github.com/flexlink/flexlink/fabric/net/tcp"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/gpufake"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/settings"

	"github.com/flexlink/flexlink/fabric/netshare"
)

// listenHook is a provider whose listeners are shown to a test as soon as
// they open, before their handles reach the peers.
type listenHook struct {
	net.Provider
	onListen func(net.Listener)
}

func (p listenHook) Listen(ctx context.Context, dev int) (net.Listener, error) {
	l, err := p.Provider.Listen(ctx, dev)
	if err == nil {
		p.onListen(l)
	}
	return l, err
}

// intruder is a process outside the job that reaches the net part's
// listeners first, over its own tcp provider on loopback.
type intruder struct {
	t     *testing.T
	p     net.Provider
	stale []byte // a listener of its own: hellos replayed from elsewhere
	mu    sync.Mutex
	conns map[string][]net.SendConn // by what was sent
}

// attack opens, to listener l of rank me (whose peer is peer), one
// connection each that sends garbage, a hello of rank peer made for
// another listener (a replay), a hello proved with another job's
// secret, and nothing at all. It returns once each has sent, so all of
// them are queued at l before the real peer connects.
func (in *intruder) attack(ctx context.Context, l net.Listener, cfg hello.Config, me, peer int) {
	other := cfg
	other.Secret = []byte("another job's secret")
	for what, msg := range map[string][]byte{
		"garbage":   []byte("\x16\x03\x01 definitely not a flexlink hello"),
		"replayed":  cfg.Marshal(hello.Hello{From: peer, To: me}, in.stale),
		"other job": other.Marshal(hello.Hello{From: peer, To: me}, l.Handle()),
		"silent":    nil,
	} {
		s, err := in.p.Connect(ctx, 0, l.Handle())
		if err != nil {
			in.t.Errorf("intruder: connect to rank %d's listener: %v", me, err)
			return
		}
		if msg != nil {
			q, err := s.ISend(msg, cfg.Tag, nil)
			if err != nil {
				in.t.Errorf("intruder: send %s: %v", what, err)
			}
			_ = q
		}
		in.mu.Lock()
		in.conns[what] = append(in.conns[what], s)
		in.mu.Unlock()
	}
}

// fakeNetRanks is fakeRanks with the net part on over loopback tcp, where
// every listener of the net part is attacked by in before its handle is
// published.
func fakeNetRanks(t *testing.T, n int, env map[string]string, bufBytes int, in *intruder) []*devRank {
	t.Helper()
	env = maps.Clone(netEnv(env))
	env["FLEXLINK_CACHE_DIR"] = t.TempDir()
	env["FLEXLINK_GPU_KERNEL_TIMEOUT"] = "60s"
	env["FLEXLINK_GPU_FLAG_BYTES"] = "0"
	env["FLEXLINK_GPU_ALLGATHER"], env["FLEXLINK_GPU_ALLTOALL"] = "push", "push"
	drv, err := gpufake.Open(gpufake.Config{Devices: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	job := fmt.Sprintf("netauth%d-%d", os.Getpid(), time.Now().UnixNano())
	secret := []byte("gpu-test")
	ctx := testCtx(t, 60*time.Second)
	return startDevRanks(t, ctx, n, bufBytes, func(r int) (comm.Options, *gpu.Device, error) {
		dev, err := drv.Device(r)
		return comm.Options{Env: settings.Map(env), Host: "fakehost", JobID: job, Secret: secret}, dev, err
	}, func(r int, c *comm.Comm, dev *gpu.Device) (*plane.DeviceComm, error) {
		cfg, err := ReadConfig(c.Env())
		if err != nil {
			return nil, err
		}
		open := cfg.Shares.OpenNIC
		cfg.Shares.OpenNIC = func(log hclog.Logger) (net.Provider, int, error) {
			p, dev, err := open(log)
			if err != nil {
				return p, dev, err
			}
			return listenHook{p, func(l net.Listener) { in.attack(ctx, l, netshare.Hello(secret, job, c.ID()), r, 1-r) }}, dev, nil
		}
		fast := plane.Candidate{
			Blocker: func(bus []string) string { return Blocker(c, dev, bus) },
			New:     func(ctx context.Context, bus []string) (plane.Plane, error) { return New(ctx, c, dev, cfg, bus) },
		}
		return plane.Choose(ctx, c, dev, cfg.Path, fast, func() plane.Plane { return staged.New(c, dev) })
	})
}

// TestGPUFakeNetForeignConnections: a process outside the job connects to
// every listener of the GPU plane's net part before the real peer, with
// garbage, a replayed hello (made for another listener), a hello of
// another job and a silent socket. Every one is dropped (the drops are
// counted; each intruder connection then fails to send), each rank's
// listener still takes its real peer, and collectives that give the net
// part a share are exact, with the net share carried.
func TestGPUFakeNetForeignConnections(t *testing.T) {
	outside, err := tcp.New(tcp.Options{IfName: "lo", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	ctx := testCtx(t, 60*time.Second)
	stale, err := outside.Listen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	in := &intruder{t: t, p: outside, stale: stale.Handle(), conns: map[string][]net.SendConn{}}
	rs := fakeNetRanks(t, 2, map[string]string{"FLEXLINK_GPU_CHUNK_BYTES": "65536", "FLEXLINK_PCIE_SHARE": "0.08",
		"FLEXLINK_GPU_NET_SHARE": "0.25"}, 2*fakeBig*8, in)

	for _, r := range rs {
		nx := r.dc.Plane().(*directPlane).nx()
		// garbage, the replay and the other job are judged; the silent one
		// is dropped when the real peer wins (or at its deadline)
		if got := nx.Drops().Count(); got < 3 {
			t.Errorf("rank %d: %d connections dropped, want at least 3 (garbage, replayed, other job)", r.c.Rank(), got)
		}
	}
	for what, cs := range in.conns {
		if len(cs) != 2 {
			t.Errorf("%s: %d intruder connections, want one per rank", what, len(cs))
		}
		for i, s := range cs {
			// a dropped connection fails the intruder's next send
			q, err := s.ISend(make([]byte, 1<<20), netshare.TagSlot, nil)
			if err == nil {
				_, err = q.Wait(ctx)
			}
			if err == nil {
				t.Errorf("%s connection %d: still delivers after setup: not dropped", what, i)
			}
			s.Close()
		}
	}
	sweep(t, rs, []devCase{
		{kind: plane.AllReduce, count: fakeBig, dt: dtype.Float32, op: dtype.Sum},
		{kind: plane.AllToAll, count: fakeBig / 2, dt: dtype.Float32},
		{kind: plane.AllGather, count: fakeBig, dt: dtype.Float32}, // last: LinkShares is its
	})
	for _, r := range rs {
		if ls := r.dc.LinkShares(); ls["net"] <= 0 {
			t.Errorf("rank %d: LinkShares %v: the net part carried nothing", r.c.Rank(), ls)
		}
	}
}
