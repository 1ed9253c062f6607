package collectives

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

// P2P is one point-to-point transfer of a Group: send Buf to Peer, or
// receive the next message from Peer into Buf.
type P2P struct {
	Send bool
	Peer int
	Buf  Buffer
}

// Group posts every transfer at once and waits for all of them, so
// patterns such as a ring exchange (everyone sends right and receives
// left) cannot deadlock, as with ncclGroupStart/End around ncclSend and
// ncclRecv. Transfers to the same peer in the same direction are matched
// in order, within and across Groups; the k-th send from a to b must have
// the length of b's k-th receive from a (else errs.ErrMismatch names both
// ranks). A rank may send to itself: its sends to itself are matched in
// order with its receives from itself in the same Group.
//
// Point-to-point calls are numbered per pair and do not count in Seq. They
// share links with collectives, so they must not be interleaved
// differently on two ranks with collectives between the same pair.
func (e *Engine) Group(ctx context.Context, ops []P2P) error {
	h := header{kind: kindP2P, algo: algoDirect, dt: noField, op: noField, root: noRoot}
	if e.failed != nil {
		return fmt.Errorf("rank %d: group of %d send/recv: engine failed earlier: %w", e.rank, len(ops), e.failed)
	}
	var selfSends, selfRecvs []Buffer
	for i, op := range ops {
		if op.Peer < 0 || op.Peer >= e.sz {
			return fmt.Errorf("rank %d: group of %d send/recv: transfer %d: peer %d outside [0,%d)", e.rank, len(ops), i, op.Peer, e.sz)
		}
	}
	start := e.obs.start(h, len(ops))
	c := &call{e: e, ctx: ctx, h: h, rank: e.rank, size: e.sz, es: 1}
	var err error
	if ctx.Err() != nil {
		err = fabric.CtxErr(ctx)
	}
	for _, op := range ops {
		if err != nil {
			break
		}
		if op.Buf == nil {
			op.Buf = HostBuffer(nil) // an empty message
		}
		if op.Peer == e.rank {
			if op.Send {
				selfSends = append(selfSends, op.Buf)
			} else {
				selfRecvs = append(selfRecvs, op.Buf)
			}
			continue
		}
		ph := h
		ph.count = int64(op.Buf.Len())
		if op.Send {
			e.p2p.sent[op.Peer]++
			ph.seq = e.p2p.sent[op.Peer]
			c.post(&xfer{req: e.p.Send(op.Peer, ph.tag(e.comm, 0), op.Buf), peer: op.Peer, send: true})
		} else {
			e.p2p.recvd[op.Peer]++
			ph.seq = e.p2p.recvd[op.Peer]
			c.post(&xfer{req: e.p.Recv(op.Peer, ph.tag(e.comm, 0), op.Buf), peer: op.Peer})
		}
	}
	if err == nil {
		err = selfCopies(c, selfSends, selfRecvs)
	}
	if err == nil {
		err = c.waitAll()
	}
	c.release()
	if err != nil {
		err = fmt.Errorf("rank %d: group of %d send/recv: %w", e.rank, len(ops), err)
		e.failed = err
	}
	e.obs.end(h, len(ops), start, err)
	return err
}

func selfCopies(c *call, sends, recvs []Buffer) error {
	if len(sends) != len(recvs) {
		return fmt.Errorf("%d sends to itself but %d receives from itself: %w", len(sends), len(recvs), errs.ErrMismatch)
	}
	for i := range sends {
		if sends[i].Len() != recvs[i].Len() {
			return fmt.Errorf("send %d to itself has %d bytes, its receive %d: %w", i, sends[i].Len(), recvs[i].Len(), errs.ErrMismatch)
		}
		if !sameMemory(sends[i], recvs[i]) {
			if err := c.copyBuf(recvs[i], sends[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Send sends buf to peer (a Group of one).
func (e *Engine) Send(ctx context.Context, buf Buffer, peer int) error {
	return e.Group(ctx, []P2P{{Send: true, Peer: peer, Buf: buf}})
}

// Recv receives the next message from peer into buf (a Group of one).
func (e *Engine) Recv(ctx context.Context, buf Buffer, peer int) error {
	return e.Group(ctx, []P2P{{Peer: peer, Buf: buf}})
}
