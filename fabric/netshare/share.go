// Package netshare is the net share of the direct GPU plane
// (collectives/direct): FLEXLINK_LINKS=nvlink,pcie,net adds a third link to
// the large pushes between two GPUs of one host, the NIC's loopback path. It is the PCIe part with another middle: the sender
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
//   - the pair's planner (fabric/pcieshare's Open), which gets the net link
//     as its third link (Spec), its profile measured over the pair's
//     connection at setup (profile, stage 1), and the pair's timing probe
//     (fabric/pcieshare, stage 2): the net share is the PCIe pairs' rider
//     (TxRider, RxRider); the receiver times the net part from the same t0
//     as the PCIe part and reports both in its next ready message, so one
//     Observe carries NVLink, PCIe and net together;
//   - the plane's ready message: Words more bytes, the announcement of a
//     net part and the net report (ReadyWords, Ready).
//
// The plane drives it through fabric/linkshare's Share, as every share;
// fabric/shares puts it second in the list, after the PCIe share, so its
// part of a push is the bytes just before the PCIe tail.
//
// A pair has a net part only where it has PCIe staging (the planner and
// the probe live there), so FLEXLINK_LINKS must name nvlink and pcie with
// net.
//
// # One call (call.go, wire.go)
//
// The plane's split gives the tail of each push to PCIe and the bytes just
// before it to the net part (Stage): D2H into the
// net staging, slot by slot, each slot's event recorded. After the work,
// before the done handshake (Send), every rank sends and receives its net
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
package netshare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/hello"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/fabric/transports"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/settings"
)

// Share is one rank's net share: its sending and receiving sides toward
// every peer whose pair has PCIe staging, the NIC's provider, and the
// running call's part. A nil *Share is the share off: BlobBytes, Offer,
// Open, Begin, ReadyWords, Ready, Start, Has and Close accept it.
type Share struct {
	Config
	// MinPart is the smallest part a balancer share may give (the split
	// reads it; DefaultMinPart, tests lower it).
	MinPart int

	late  lateAbort         // aborts held back after a failed call (wire.go)
	tx    []*txSide         // by peer: this rank's sending side (nil: none)
	rx    []*rxSide         // by peer: this rank's receiving side
	plan  linkshare.Plan    // this call's split (Begin)
	prov  net.Provider      // the NIC's provider (Offer)
	nic   int               // the provider's device the share sends from
	lis   []*hello.Listener // by peer, during setup only
	start *gpu.Event        // recorded on the caller's stream after the ready waits
	conns *hello.Layer      // listens, dials and accepts with a proved hello (fabric/net/hello)
	drops *hello.Drops      // connections dropped by the listeners (one WARN a minute)

	// Test hooks: Fault is asked at "d2h", "send" (before the table),
	// "slot" (before each slot) and "h2d" (peer: the other end); OnSplit
	// sees each side's view of a pair's table.
	Fault   func(where string, peer int) error
	OnSplit func(pcieshare.SplitRec)
}

// Host is what the share needs of the communicator: names for logs and
// errors, its id (the hellos' scope) and the job's fate (every wait ends
// when the job aborts). A Host that also has JobAuth proves the job
// secret; without it the share refuses to listen.
type Host interface {
	Log() hclog.Logger
	Host() string
	PeerHost(rank int) string
	Name() string // the communicator's name
	ID() uint64   // the communicator's id
	JobErr() error
	JobDone() <-chan struct{}
}

// JobAuth is what the communicator gives the share to prove: the job
// secret and id (internal/comm.Comm has it).
type JobAuth interface {
	JobAuth() (secret []byte, jobID string)
}

// Config is what New needs.
type Config struct {
	Host    Host
	Dev     *gpu.Device
	N, Me   int
	PCIe    *pcieshare.Share // the PCIe share whose pairs this one rides with
	Fixed   float64          // FLEXLINK_GPU_NET_SHARE; < 0: the planner decides
	Staging int              // bytes of each staging buffer (as the PCIe staging)
	// OpenNIC opens the provider and picks the device the share sends
	// from (FLEXLINK_NET, FLEXLINK_NET_IFNAME, ...).
	OpenNIC func(hclog.Logger) (net.Provider, int, error)
	Count   func(bytes int) // bytes staged (the plane's link counts)
}

// New makes the share; Offer and Open set its pairs up, after the PCIe
// share's Offer and Open.
func New(cfg Config) *Share {
	return &Share{Config: cfg, MinPart: DefaultMinPart, tx: make([]*txSide, cfg.N), rx: make([]*rxSide, cfg.N)}
}

// Kind is the share's link: net.
func (x *Share) Kind() fabric.Kind { return fabric.KindNet }

// Has reports whether this rank sends a net part toward peer j (its pair
// has one).
func (x *Share) Has(j int) bool { return x != nil && x.tx[j] != nil }

// Drops counts the connections the listeners dropped.
func (x *Share) Drops() *hello.Drops { return x.drops }

// Provider is the NIC's provider (nil before Offer).
func (x *Share) Provider() net.Provider { return x.prov }

func (x *Share) count(n int) {
	if x.Count != nil {
		x.Count(n)
	}
}

// txSide is this rank's sending side of the net part toward one peer.
type txSide struct {
	*pcie.Tx // staging (never shared), D2H stream, join event, slot events
	conn     net.SendConn
	logged   map[int]float64
	report   uint64         // the peer's report on the last timed push (ns; ready words)
	part     pcieshare.Part // this call's part (begin resets it)
}

// The pair's probe (fabric/pcieshare) asks these of the net part.
func (nt *txSide) Planned() bool  { return nt.part.Plan.Bytes > 0 }
func (nt *txSide) Staged() int    { return nt.part.Staged }
func (nt *txSide) Report() uint64 { return nt.report }

// rxSide is this rank's receiving side of the net part from one peer.
type rxSide struct {
	*pcie.Tx // staging the bytes land in, H2D stream, join event (slot events unused)
	conn     net.RecvConn
	expect   bool       // this call's net part from the peer is announced
	busy     bool       // the join event follows H2D copies not yet known done
	end      *gpu.Event // timing: the end of a timed part's H2D copies
	timed    bool       // end is recorded for the pending probe
}

func (nr *rxSide) Expects() bool { return nr.expect }

// TimedEnd is the end event of the net part in the pending probe (nil:
// none was timed).
func (nr *rxSide) TimedEnd() *gpu.Event {
	if !nr.timed {
		return nil
	}
	return nr.end
}

// Untime ends the pending probe's net timing.
func (nr *rxSide) Untime() { nr.timed = false }

// Defaults of the net link in the planner: a NIC that reports no speed
// (loopback, veth) is taken for 10 Gbit/s, and every part pays the host's
// round trip (waiting for the D2H, the wire, the receiver's H2D launch).
const (
	PriorBW  = 1.25e9
	priorLat = 100 * time.Microsecond
	// DefaultMinPart is the smallest net part the planner's share may give: a
	// part waits on the host for its D2H copies, crosses the NIC and is
	// copied H2D, a fixed cost the planner's model underrates. On 2xH100
	// the planner gave a 1 GiB allgather 1% (10.7 MB) over loopback tcp
	// and the call took 2141 us against 1481 without it (docs/PERF.md).
	// A fixed FLEXLINK_GPU_NET_SHARE is not cut.
	DefaultMinPart = 32 << 20
	MaxShare       = pcie.MaxShare // a net part never exceeds half a push
)

// Spec is how the plane's split sizes the net parts: they ride with the
// PCIe pairs (whose smallest slot they share).
func (x *Share) Spec() linkshare.Spec {
	return linkshare.Spec{Fixed: x.Fixed, MinPart: x.MinPart, Max: MaxShare, Staging: x.Staging, MinSlot: x.PCIe.MinSlot, Rides: true}
}

// Settle has nothing to feed back: the pairs' probes are the PCIe share's.
func (x *Share) Settle([]int) {}

// Fraction is the pair planner's net fraction of a push of b bytes toward
// peer j (the PCIe pair's planner, whose third link this is).
func (x *Share) Fraction(j, b int) float64 {
	_, f := x.PCIe.Shares(j, b)
	return f
}

// LinkSpec is the net link's prior for the pairs' planners (after Offer).
func (x *Share) LinkSpec() balance.LinkSpec {
	bw, lat := PriorBW, priorLat
	if d := x.prov.Devices()[x.nic]; d.Speed > 0 {
		bw = d.Speed
	}
	return balance.LinkSpec{ID: pcieshare.LinkRider, Kind: fabric.KindNet, Bandwidth: bw, Latency: lat}
}

// handleBytes is one handle's slot in the setup blob: a length byte and
// the handle.
const handleBytes = 1 + net.MaxHandleBytes

// BlobBytes is this rank's part of the plane's setup exchange: a listen
// handle for every peer (0 when the share is off: x nil).
func (x *Share) BlobBytes() int {
	if x == nil {
		return 0
	}
	return x.N * handleBytes
}

// Offer opens the provider and one listener per peer, and writes their
// handles into b (slot r: the listener rank r connects to).
func (x *Share) Offer(ctx context.Context, b []byte) error {
	if x == nil {
		return nil
	}
	var err error
	ja, ok := x.Host.(JobAuth)
	if !ok {
		return fmt.Errorf("gpu net part: communicator %s cannot prove the job secret (its host has no JobAuth): refusing unauthenticated listeners", x.Host.Name())
	}
	secret, job := ja.JobAuth()
	x.drops = &hello.Drops{Log: x.Host.Log(), What: fmt.Sprintf("gpu net part of rank %d on %s", x.Me, x.Host.Host())}
	if x.prov, x.nic, err = x.OpenNIC(x.Host.Log()); err != nil {
		return fmt.Errorf("gpu net part (FLEXLINK_LINKS names net; its NIC: FLEXLINK_NET, FLEXLINK_NET_IFNAME, FLEXLINK_NET_DEVICES): %w", err)
	}
	if x.conns, err = hello.Open(x.prov, x.nic, hello.Options{Config: Hello(secret, job, x.Host.ID()), MaxTag: tagMax,
		What: "the gpu net part (FLEXLINK_LINKS names net; FLEXLINK_NET picks the provider)", Drops: x.drops}); err != nil {
		return fmt.Errorf("gpu net part of rank %d on %s: %w", x.Me, x.Host.Host(), err)
	}
	x.lis = make([]*hello.Listener, x.N)
	for j := 0; j < x.N; j++ {
		if j == x.Me {
			continue
		}
		if x.lis[j], err = x.conns.Listen(ctx); err != nil {
			return fmt.Errorf("gpu net part of rank %d on %s: %w", x.Me, x.Host.Host(), err)
		}
		h := x.lis[j].Handle()
		b[j*handleBytes] = byte(len(h))
		copy(b[j*handleBytes+1:], h)
	}
	return nil
}

// helloTag is the tag of a connection's hello, before the net part's
// other tags (wire.go).
const helloTag = uint64(1 << 16)

// netHello is what the net part's connections of communicator id prove.
func Hello(secret []byte, jobID string, id uint64) hello.Config {
	return hello.Config{Secret: secret, JobID: jobID, Purpose: "flexlink gpu net part hello", Scope: fmt.Sprintf("communicator %#x", id), Tag: helloTag}
}

// open connects the net part of every pair that has PCIe staging (px.tx
// toward the peer, px.rx from it; both sides of a pair agree on those):
// this rank connects to the listener each receiver offered it and says
// its proved hello, then accepts from each sender the first connection
// whose hello proves the secret and names that sender (others are
// dropped; see "Who may connect"). A connection is usable before it is
// accepted, so no rank waits for another's order. blobs[r] is rank r's
// part of the exchange.
func (x *Share) Open(ctx context.Context, blobs [][]byte, _ linkshare.Open) (err error) {
	if x == nil {
		return nil
	}
	defer x.closeListeners()
	ctx, cancel := x.jobCtx(ctx)
	defer cancel()
	var confirms []net.Request
	for j := range x.N {
		t := x.PCIe.Tx(j)
		if t == nil {
			continue
		}
		h := blobs[j][x.Me*handleBytes:]
		if h[0] == 0 || int(h[0]) > net.MaxHandleBytes {
			return fmt.Errorf("gpu net part: rank %d on %s offered no listener (FLEXLINK_LINKS differs between ranks?)", j, x.Host.PeerHost(j))
		}
		nt := &txSide{logged: map[int]float64{}, part: pcieshare.Part{Slot: -1}}
		x.tx[j], t.Rider = nt, nt
		if nt.Tx, err = pcie.NewTx(x.Dev, x.Staging); err != nil {
			return fmt.Errorf("gpu net part toward rank %d: %w", j, err)
		}
		var q net.Request
		if nt.conn, q, err = x.conns.Dial(ctx, h[1:1+h[0]], hello.Hello{From: x.Me, To: j}); err != nil {
			return fmt.Errorf("gpu net part: rank %d to rank %d on %s over net: %w", x.Me, j, x.Host.PeerHost(j), err)
		}
		confirms = append(confirms, q)
	}
	for j := range x.N {
		r := x.PCIe.Rx(j)
		if r == nil {
			continue
		}
		nr := &rxSide{}
		x.rx[j], r.Rider = nr, nr
		if nr.Tx, err = pcie.NewTx(x.Dev, x.Staging); err != nil {
			return fmt.Errorf("gpu net part from rank %d: %w", j, err)
		}
		want := func(h hello.Hello) error {
			if h.From != j || h.To != x.Me {
				return fmt.Errorf("hello from rank %d to rank %d reached rank %d's listener for rank %d", h.From, h.To, x.Me, j)
			}
			return nil
		}
		if nr.conn, _, err = x.lis[j].Accept(ctx, want); err != nil {
			return fmt.Errorf("gpu net part: accept from rank %d on %s over net (%s): %w", j, x.Host.PeerHost(j), x.nicName(), err)
		}
	}
	for _, q := range confirms { // the receivers took the hellos: a refused one fails here
		if _, err := q.Wait(ctx); err != nil {
			return fmt.Errorf("gpu net part: hello over net (%s) refused (wrong job secret or communicator?): %w", x.nicName(), err)
		}
	}
	x.Host.Log().Info("gpu net link", "nic", x.nicName(), "staging", x.Staging, "shares", x.by())
	return x.profile(ctx)
}

// probeBytes and probes: stage 1 of the net link's planner, a few
// messages of this size over each pair's connection at setup.
const (
	probeBytes = 1 << 20
	probes     = 3
)

// profile measures every pair's connection at setup (stage 1 of the
// balancer): each sender sends probes messages of probeBytes from its
// staging, one at a time, and times each from ISend to its completion (the
// receiver has the bytes); the fastest becomes the net link's profile in
// the pair's planner (unless that came from the profile cache), in place
// of the NIC's nominal speed. That is the wire alone, host memory to host
// memory; the D2H and H2D copies and the host's wait for them are what
// stage 2 (the timed pushes) adds. Every rank posts its receives before it
// sends, so no rank waits on another's order.
func (x *Share) profile(ctx context.Context) error {
	var recvs []net.Request
	for j, r := range x.rx {
		if r == nil {
			continue
		}
		m := r.Mem.Bytes()[:min(probeBytes, x.Staging)]
		for i := range probes {
			q, err := r.conn.IRecv([][]byte{m}, []uint64{tagProbe | uint64(i)}, nil)
			if err != nil {
				return fmt.Errorf("gpu net part: probe from rank %d over net (%s): %w", j, x.nicName(), err)
			}
			recvs = append(recvs, q)
		}
	}
	for j, nt := range x.tx {
		if nt == nil {
			continue
		}
		t := x.PCIe.Tx(j)
		m := nt.Mem.Bytes()[:min(probeBytes, x.Staging)]
		best := time.Duration(math.MaxInt64)
		for i := range probes {
			start := time.Now()
			q, err := nt.conn.ISend(m, tagProbe|uint64(i), nil)
			if err == nil {
				_, err = q.Wait(ctx)
			}
			if err != nil {
				return fmt.Errorf("gpu net part: probe toward rank %d on %s over net (%s): %w", j, x.Host.PeerHost(j), x.nicName(), err)
			}
			best = min(best, time.Since(start))
		}
		x.Host.Log().Info("gpu net probe", "peer", j, "bytes", len(m), "gbps", round3(float64(len(m))/best.Seconds()/1e9),
			"us", best.Microseconds(), "used", !t.Cached)
		if t.Cached {
			continue
		}
		pl, err := balance.NewPlanner(t.Planner.Links(), []balance.Probe{{Link: pcieshare.LinkRider, Bytes: int64(len(m)), Duration: best}}, balance.Config{})
		if err != nil {
			return err
		}
		t.Planner = pl
	}
	for _, q := range recvs {
		if _, err := q.Wait(ctx); err != nil {
			return fmt.Errorf("gpu net part: probe over net (%s): %w", x.nicName(), err)
		}
	}
	return nil
}

// nicName names the link in errors and logs: "tcp lo".
func (x *Share) nicName() string {
	return x.prov.Name() + " " + x.prov.Devices()[x.nic].Name
}

func (x *Share) by() string {
	if x.Fixed >= 0 {
		return fmt.Sprintf("FLEXLINK_GPU_NET_SHARE=%g", x.Fixed)
	}
	return "balancer"
}

func (x *Share) closeListeners() {
	for j, l := range x.lis {
		if l != nil {
			l.Close()
			x.lis[j] = nil
		}
	}
}

// jobCtx is ctx, also ended when the job aborts (a peer failed elsewhere).
func (x *Share) jobCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-x.Host.JobDone():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// abort fails every connection of the net part with err (the peers' pending
// requests fail at once) after a call failed in it.
func (x *Share) abort(err error) {
	for _, t := range x.tx {
		if t != nil && t.conn != nil {
			t.conn.Abort(err)
		}
	}
	for _, r := range x.rx {
		if r != nil && r.conn != nil {
			r.conn.Abort(err)
		}
	}
}

// close closes the connections (so the provider no longer touches the
// staging), the staging, the timing events and the provider; before the
// PCIe share closes.
func (x *Share) Close() error {
	if x == nil {
		return nil
	}
	var errs []error
	x.late.flush() // a held-back abort runs now, before the connections close
	x.closeListeners()
	for j, t := range x.tx {
		if t == nil {
			continue
		}
		if t.conn != nil {
			t.conn.Close()
		}
		if t.Tx != nil {
			errs = append(errs, t.Tx.Close())
		}
		x.tx[j] = nil
	}
	for j, r := range x.rx {
		if r == nil {
			continue
		}
		if r.conn != nil {
			r.conn.Close()
		}
		if r.Tx != nil {
			errs = append(errs, pcieshare.CloseEvents([]*gpu.Event{r.end}, r.Tx.Close()))
		}
		x.rx[j] = nil
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

// OpenNIC opens the provider FLEXLINK_NET picks (fabric/transports) and
// the device the share sends from (Config.OpenNIC): the first one FLEXLINK_NET_DEVICES (or
// FLEXLINK_NET_IFNAME) leaves.
func OpenNIC(env settings.Env, log hclog.Logger) (net.Provider, int, error) {
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
