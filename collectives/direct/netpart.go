package direct

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/hello"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/transports"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/settings"
)

// The net part of the direct plane: FLEXLINK_LINKS=nvlink,pcie,net adds a
// third link to the large pushes between two GPUs of one host, the NIC's
// loopback path. It is the PCIe part with another middle: the sender
// copies its part D2H into a pinned staging buffer, as for PCIe, but the
// bytes then travel to the receiver's own pinned buffer over a fabric/net
// connection (the provider FLEXLINK_NET picks, on the host's own NIC
// address; loopback in the tests) instead of being read from the peer's
// mapped memory, and the receiver copies them H2D into its recv buffer.
//
// # What it reuses
//
//   - the staging (fabric/pcie.Tx: a pinned buffer, a copy stream, a join
//     event and slot events) on both ends, sized like the PCIe staging
//     (FLEXLINK_PCIE_STAGING_BYTES), and the sizing of a part (pcie.Size,
//     Plan.Due: whole pages, at most the staging, at most pcie.Slots
//     slots);
//   - the pair's planner (pcie.go plannerFor), which gets the net link as
//     its third link, its profile measured over the pair's connection at
//     setup (profile, stage 1), and the pair's timing probe
//     (pcie_probe.go, stage 2): the receiver times the net part from the
//     same t0 as the PCIe part and reports both in its next ready message,
//     so one Observe carries NVLink, PCIe and net together;
//   - the ready message (direct.go): two more words, the announcement of
//     a net part and the net report.
//
// A pair has a net part only where it has PCIe staging (the planner and
// the probe live there), so FLEXLINK_LINKS must name nvlink and pcie with
// net.
//
// # One call (netpart_call.go)
//
// The pushes give the tail of each push to PCIe as before and the bytes
// just before it to the net part (moves.go pushSplitWith): D2H into the
// net staging, slot by slot, each slot's event recorded. After the work,
// before the done handshake (run), every rank sends and receives its net
// parts at once, without blocking on any one: the sender posts the staging
// table (one message) and then each slot as soon as its event has fired;
// the receiver receives the table, then the slots, and enqueues each
// slot's H2D as it lands; its stream then waits for those copies. Unlike
// the PCIe part this makes the call wait for the GPU (the host must see
// the D2H done before it sends): one reason the net part rarely pays, which
// the balancer learns.
//
// # Why the staging buffers are free
//
// The sender's buffer: every send of a call completes (the receiver has
// the bytes) before the call returns, and the next call's D2H is enqueued
// after that. The receiver's: before it posts a receive into it, the host
// waits for the join event of the previous call's H2D copies.
//
// # Who may connect
//
// Each listener takes exactly one connection, from the peer it was offered
// to, and that connection must prove the job secret first (fabric/net/hello:
// the hello names sender and receiver and is bound to the job, this
// communicator and this listener). A connection that sends anything else,
// a hello for another listener, job or rank, or nothing within the hello
// deadline is dropped with one rate-limited WARN, and the listener keeps
// waiting for the real peer: whoever reaches the port first cannot feed a
// rank's staging buffer.
//
// # Failure
//
// Every wait (slot events, requests) is bounded by the call's context and
// the job's fate. A failed request, a peer that goes away, a table that
// does not fit: the call fails with an error naming the peer's rank and
// host and the link ("net (tcp lo)"), and every connection of this plane
// is aborted, so the peers' requests fail at once instead of waiting.
type netState struct {
	*peers
	prov    net.Provider
	nicIdx  int     // the provider's device the part sends from
	fixed   float64 // FLEXLINK_GPU_NET_SHARE; < 0: the planner decides
	minPart int     // smallest part the planner's share may give (netMinPart; tests lower it)
	staging int     // bytes of each staging buffer (as the PCIe staging)
	stats   *linkStats
	openNIC func(hclog.Logger) (net.Provider, int, error)
	lis     []*hello.Listener // by peer, during setup only
	start   *gpu.Event        // recorded on the caller's stream after the ready waits
	conns   *hello.Layer      // listens, dials and accepts with a proved hello (fabric/net/hello)
	drops   *hello.Drops      // connections dropped by the listeners (one WARN a minute)

	// Test hooks: fault is asked at "d2h", "send" (before the table),
	// "slot" (before each slot) and "h2d" (peer: the other end); onSplit
	// sees each side's view of a pair's table.
	fault   func(where string, peer int) error
	onSplit func(pcieSplitRec)
}

// netTx is this rank's sending side of the net part toward one peer.
type netTx struct {
	*pcie.Tx // staging (never shared), D2H stream, join event, slot events
	conn     net.SendConn
	logged   map[int]float64
	report   uint64 // the peer's report on the last timed push (ns; ready words)
	txCall          // this call's part (plan resets it)
}

// netRx is this rank's receiving side of the net part from one peer.
type netRx struct {
	*pcie.Tx // staging the bytes land in, H2D stream, join event (slot events unused)
	conn     net.RecvConn
	expect   bool       // this call's net part from the peer is announced
	busy     bool       // the join event follows H2D copies not yet known done
	end      *gpu.Event // timing: the end of a timed part's H2D copies
	timed    bool       // end is recorded for the pending probe
}

// Defaults of the net link in the planner: a NIC that reports no speed
// (loopback, veth) is taken for 10 Gbit/s, and every part pays the host's
// round trip (waiting for the D2H, the wire, the receiver's H2D launch).
const (
	netPriorBW  = 1.25e9
	netPriorLat = 100 * time.Microsecond
	// netMinPart is the smallest net part the planner's share may give: a
	// part waits on the host for its D2H copies, crosses the NIC and is
	// copied H2D, a fixed cost the planner's model underrates. On 2xH100
	// the planner gave a 1 GiB allgather 1% (10.7 MB) over loopback tcp
	// and the call took 2141 us against 1481 without it (docs/PERF.md).
	// A fixed FLEXLINK_GPU_NET_SHARE is not cut.
	netMinPart  = 32 << 20
	netMaxShare = pcieMaxShare // a net part never exceeds half a push
)

// openNet opens the provider FLEXLINK_NET picks (fabric/transports) and
// the device the net part uses: the first one FLEXLINK_NET_DEVICES (or
// FLEXLINK_NET_IFNAME) leaves.
func openNet(env settings.Env, log hclog.Logger) (net.Provider, int, error) {
	nc, err := transports.ReadNetConfig(env)
	if err != nil {
		return nil, 0, err
	}
	p, err := transports.OpenNet(nc, env, log)
	if err != nil {
		return nil, 0, err
	}
	devs, err := transports.SelectDevices(p.Devices(), nc.Devices, nil)
	if err == nil && len(devs) == 0 {
		err = fmt.Errorf("the network transport found no NIC (FLEXLINK_NET_IFNAME=%q)", nc.IfName)
	}
	if err != nil {
		p.Close()
		return nil, 0, err
	}
	return p, devs[0], nil
}

// newNetState is the net part when FLEXLINK_LINKS names net (nil, the
// part off, otherwise: an empty FLEXLINK_LINKS keeps it off).
func newNetState(pr *peers, cfg NetConfig, pc PCIeConfig, stats *linkStats) (*netState, error) {
	named := false
	for _, k := range strings.Split(pc.Links, ",") {
		named = named || fabric.Kind(strings.ToLower(strings.TrimSpace(k))) == fabric.KindNet
	}
	if !named || cfg.Open == nil {
		return nil, nil
	}
	kinds, err := namedKinds(pc.Links)
	if err != nil {
		return nil, err
	}
	if !kinds[fabric.KindNVLink] || !kinds[fabric.KindPCIe] {
		return nil, fmt.Errorf("FLEXLINK_LINKS=%q names net without nvlink and pcie: the direct GPU path's net part rides with the pcie share (name nvlink,pcie,net, or set FLEXLINK_GPU_PATH=staged)",
			pc.Links)
	}
	if pc.StagingBytes == 0 {
		return nil, nil // no PCIe staging: no pair has a planner for the net part
	}
	stats.net = true
	return &netState{peers: pr, fixed: cfg.Share, minPart: netMinPart, staging: pcie.RoundStaging(pc.StagingBytes), stats: stats, openNIC: cfg.Open}, nil
}

// spec is the net link's prior for the pairs' planners.
func (x *netState) spec() balance.LinkSpec {
	bw, lat := netPriorBW, netPriorLat
	if d := x.prov.Devices()[x.nicIdx]; d.Speed > 0 {
		bw = d.Speed
	}
	return balance.LinkSpec{ID: linkNet, Kind: fabric.KindNet, Bandwidth: bw, Latency: lat}
}

// handleBytes is one handle's slot in the setup blob: a length byte and
// the handle.
const handleBytes = 1 + net.MaxHandleBytes

// blobBytes is this rank's net part of New's setup exchange: a listen
// handle for every peer (0 when the part is off).
func (x *netState) blobBytes() int {
	if x == nil {
		return 0
	}
	return x.n * handleBytes
}

// offer opens the provider and one listener per peer, and writes their
// handles into b (slot r: the listener rank r connects to).
func (x *netState) offer(ctx context.Context, b []byte) error {
	if x == nil {
		return nil
	}
	var err error
	ja, ok := x.c.(jobAuth)
	if !ok {
		return fmt.Errorf("gpu net part: communicator %s cannot prove the job secret (its host has no JobAuth): refusing unauthenticated listeners", x.c.Name())
	}
	secret, job := ja.JobAuth()
	x.drops = &hello.Drops{Log: x.c.Log(), What: fmt.Sprintf("gpu net part of rank %d on %s", x.me, x.c.Host())}
	if x.prov, x.nicIdx, err = x.openNIC(x.c.Log()); err != nil {
		return fmt.Errorf("gpu net part (FLEXLINK_LINKS names net; its NIC: FLEXLINK_NET, FLEXLINK_NET_IFNAME, FLEXLINK_NET_DEVICES): %w", err)
	}
	if x.conns, err = hello.Open(x.prov, x.nicIdx, hello.Options{Config: netHello(secret, job, x.c.ID()), MaxTag: netTagMax,
		What: "the gpu net part (FLEXLINK_LINKS names net; FLEXLINK_NET picks the provider)", Drops: x.drops}); err != nil {
		return fmt.Errorf("gpu net part of rank %d on %s: %w", x.me, x.c.Host(), err)
	}
	x.lis = make([]*hello.Listener, x.n)
	for j := 0; j < x.n; j++ {
		if j == x.me {
			continue
		}
		if x.lis[j], err = x.conns.Listen(ctx); err != nil {
			return fmt.Errorf("gpu net part of rank %d on %s: %w", x.me, x.c.Host(), err)
		}
		h := x.lis[j].Handle()
		b[j*handleBytes] = byte(len(h))
		copy(b[j*handleBytes+1:], h)
	}
	return nil
}

// jobAuth is what the communicator gives the net part to prove: the job
// secret and id (internal/comm.Comm has it).
type jobAuth interface {
	JobAuth() (secret []byte, jobID string)
}

// netHelloTag is the tag of a connection's hello, before the net part's
// other tags (netpart_wire.go).
const netHelloTag = uint64(1 << 16)

// netHello is what the net part's connections of communicator id prove.
func netHello(secret []byte, jobID string, id uint64) hello.Config {
	return hello.Config{Secret: secret, JobID: jobID, Purpose: "flexlink gpu net part hello", Scope: fmt.Sprintf("communicator %#x", id), Tag: netHelloTag}
}

// open connects the net part of every pair that has PCIe staging (px.tx
// toward the peer, px.rx from it; both sides of a pair agree on those):
// this rank connects to the listener each receiver offered it and says
// its proved hello, then accepts from each sender the first connection
// whose hello proves the secret and names that sender (others are
// dropped; see "Who may connect"). A connection is usable before it is
// accepted, so no rank waits for another's order. blobs[r] is rank r's
// part of the exchange.
func (x *netState) open(ctx context.Context, blobs [][]byte, px *pcieState) (err error) {
	if x == nil {
		return nil
	}
	defer x.closeListeners()
	ctx, cancel := x.jobCtx(ctx)
	defer cancel()
	var confirms []net.Request
	for j, t := range px.tx {
		if t == nil {
			continue
		}
		h := blobs[j][x.me*handleBytes:]
		if h[0] == 0 || int(h[0]) > net.MaxHandleBytes {
			return fmt.Errorf("gpu net part: rank %d on %s offered no listener (FLEXLINK_LINKS differs between ranks?)", j, x.c.PeerHost(j))
		}
		nt := &netTx{logged: map[int]float64{}, txCall: txCall{slot: -1}}
		t.net = nt
		if nt.Tx, err = pcie.NewTx(x.peers.dev, x.staging); err != nil {
			return fmt.Errorf("gpu net part toward rank %d: %w", j, err)
		}
		var q net.Request
		if nt.conn, q, err = x.conns.Dial(ctx, h[1:1+h[0]], hello.Hello{From: x.me, To: j}); err != nil {
			return fmt.Errorf("gpu net part: rank %d to rank %d on %s over net: %w", x.me, j, x.c.PeerHost(j), err)
		}
		confirms = append(confirms, q)
	}
	for j, r := range px.rx {
		if r == nil {
			continue
		}
		nr := &netRx{}
		r.net = nr
		if nr.Tx, err = pcie.NewTx(x.peers.dev, x.staging); err != nil {
			return fmt.Errorf("gpu net part from rank %d: %w", j, err)
		}
		want := func(h hello.Hello) error {
			if h.From != j || h.To != x.me {
				return fmt.Errorf("hello from rank %d to rank %d reached rank %d's listener for rank %d", h.From, h.To, x.me, j)
			}
			return nil
		}
		if nr.conn, _, err = x.lis[j].Accept(ctx, want); err != nil {
			return fmt.Errorf("gpu net part: accept from rank %d on %s over net (%s): %w", j, x.c.PeerHost(j), x.nic(), err)
		}
	}
	for _, q := range confirms { // the receivers took the hellos: a refused one fails here
		if _, err := q.Wait(ctx); err != nil {
			return fmt.Errorf("gpu net part: hello over net (%s) refused (wrong job secret or communicator?): %w", x.nic(), err)
		}
	}
	x.c.Log().Info("gpu net link", "nic", x.nic(), "staging", x.staging, "shares", x.by())
	return x.profile(ctx, px)
}

// netProbeBytes and netProbes: stage 1 of the net link's planner, a few
// messages of this size over each pair's connection at setup.
const (
	netProbeBytes = 1 << 20
	netProbes     = 3
)

// profile measures every pair's connection at setup (stage 1 of the
// balancer): each sender sends netProbes messages of netProbeBytes from its
// staging, one at a time, and times each from ISend to its completion (the
// receiver has the bytes); the fastest becomes the net link's profile in
// the pair's planner (unless that came from the profile cache), in place
// of the NIC's nominal speed. That is the wire alone, host memory to host
// memory; the D2H and H2D copies and the host's wait for them are what
// stage 2 (the timed pushes) adds. Every rank posts its receives before it
// sends, so no rank waits on another's order.
func (x *netState) profile(ctx context.Context, px *pcieState) error {
	var recvs []net.Request
	for j, r := range px.rx {
		if r == nil {
			continue
		}
		m := r.net.Mem.Bytes()[:min(netProbeBytes, x.staging)]
		for i := range netProbes {
			q, err := r.net.conn.IRecv([][]byte{m}, []uint64{netTagProbe | uint64(i)}, nil)
			if err != nil {
				return fmt.Errorf("gpu net part: probe from rank %d over net (%s): %w", j, x.nic(), err)
			}
			recvs = append(recvs, q)
		}
	}
	for j, t := range px.tx {
		if t == nil {
			continue
		}
		m := t.net.Mem.Bytes()[:min(netProbeBytes, x.staging)]
		best := time.Duration(math.MaxInt64)
		for i := range netProbes {
			start := time.Now()
			q, err := t.net.conn.ISend(m, netTagProbe|uint64(i), nil)
			if err == nil {
				_, err = q.Wait(ctx)
			}
			if err != nil {
				return fmt.Errorf("gpu net part: probe toward rank %d on %s over net (%s): %w", j, x.c.PeerHost(j), x.nic(), err)
			}
			best = min(best, time.Since(start))
		}
		x.c.Log().Info("gpu net probe", "peer", j, "bytes", len(m), "gbps", round3(float64(len(m))/best.Seconds()/1e9),
			"us", best.Microseconds(), "used", !t.cached)
		if t.cached {
			continue
		}
		pl, err := balance.NewPlanner(t.planner.Links(), []balance.Probe{{Link: linkNet, Bytes: int64(len(m)), Duration: best}}, balance.Config{})
		if err != nil {
			return err
		}
		t.planner = pl
	}
	for _, q := range recvs {
		if _, err := q.Wait(ctx); err != nil {
			return fmt.Errorf("gpu net part: probe over net (%s): %w", x.nic(), err)
		}
	}
	return nil
}

// nic names the link in errors and logs: "tcp lo".
func (x *netState) nic() string {
	return x.prov.Name() + " " + x.prov.Devices()[x.nicIdx].Name
}

func (x *netState) by() string {
	if x.fixed >= 0 {
		return fmt.Sprintf("FLEXLINK_GPU_NET_SHARE=%g", x.fixed)
	}
	return "balancer"
}

func (x *netState) closeListeners() {
	for j, l := range x.lis {
		if l != nil {
			l.Close()
			x.lis[j] = nil
		}
	}
}

// jobCtx is ctx, also ended when the job aborts (a peer failed elsewhere).
func (x *netState) jobCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-x.c.JobDone():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// abort fails every connection of the net part with err (the peers' pending
// requests fail at once) after a call failed in it.
func (x *netState) abort(tx []*pcieTx, rx []*pcieRx, err error) {
	for _, t := range tx {
		if t != nil && t.net != nil && t.net.conn != nil {
			t.net.conn.Abort(err)
		}
	}
	for _, r := range rx {
		if r != nil && r.net != nil && r.net.conn != nil {
			r.net.conn.Abort(err)
		}
	}
}

// close closes the connections (so the provider no longer touches the
// staging), the staging, the timing events and the provider.
func (x *netState) close(tx []*pcieTx, rx []*pcieRx) error {
	if x == nil {
		return nil
	}
	var errs []error
	x.closeListeners()
	for _, t := range tx {
		if t == nil || t.net == nil {
			continue
		}
		if t.net.conn != nil {
			t.net.conn.Close()
		}
		if t.net.Tx != nil {
			errs = append(errs, t.net.Tx.Close())
		}
		t.net = nil
	}
	for _, r := range rx {
		if r == nil || r.net == nil {
			continue
		}
		if r.net.conn != nil {
			r.net.conn.Close()
		}
		if r.net.Tx != nil {
			errs = append(errs, closeEvents([]*gpu.Event{r.net.end}, r.net.Tx.Close()))
		}
		r.net = nil
	}
	if x.start != nil {
		errs = append(errs, x.start.Close())
		x.start = nil
	}
	if x.prov != nil {
		errs = append(errs, x.prov.Close())
		x.prov = nil
	}
	return errors.Join(errs...)
}
