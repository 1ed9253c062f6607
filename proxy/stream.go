package proxy

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// A relay's group stream to destination d is one connection from the
// relay's NIC (connGroup) that carries, for d, the chunks of every local
// sender whose route to d goes through this relay, the relay's own
// included, each tagged with its sender's rank. d says in advance, on its clear-to-send connection
// (cts.go), how it will take them: batches, each the next chunk of up to
// MaxRecvs senders, that d receives in one multi-receive apiece. The
// stream sends the batches in d's order: a batch's chunks as they come
// from their senders (in any order within the batch), the next batch's
// only after every chunk of this one has left. A chunk that is not due
// yet waits in its staging slot under its sender's credit, so nothing
// reaches d that d has not posted a receive for, and a late sender holds
// back only the batches it is in and those behind them on this stream.
// (As in NCCL, the messages one receiver takes through a relay's shared
// connection move together, a round of chunks at a time.)

// want is a batch member: the next chunk of sender s, of a message that
// d receives as total bytes.
type want struct{ s, total int }

// dstream is the relay's stream to one destination.
type dstream struct {
	d     int
	in    chan staged // chunks of the local senders and this rank (credited: never full)
	sched chan []batchWants
}

// batchWants is one batch of d's clear-to-send.
type batchWants []want

// streamTo returns the stream to d, started on first use (the first
// chunk handed for d, or d's first clear-to-send).
func (sv *service) streamTo(d int) *dstream {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	ds := sv.streams[d]
	if ds == nil {
		ds = &dstream{d: d, in: make(chan staged, sv.p.cfg.Credits*len(sv.post)+sv.p.cfg.Credits), sched: make(chan []batchWants, 64)}
		sv.streams[d] = ds
		if sv.ctx.Err() == nil { // else closed or failed: nothing runs, and Group reports sv's end
			sv.wg.Add(1)
			go sv.run(ds)
		}
	}
	return ds
}

// run connects the stream and sends its batches as their chunks come,
// returning each chunk's credit to its sender once its network send
// completed (a connection's sends complete in order).
func (sv *service) run(ds *dstream) {
	defer sv.wg.Done()
	p := sv.p
	me, d, host := p.cfg.Rank, ds.d, p.cfg.Hosts[ds.d]
	ctx, cancel := context.WithTimeout(sv.ctx, connectTimeout)
	sc, err := p.conns.to(ctx, d, connGroup)
	cancel()
	if err != nil {
		sv.fail(fmt.Errorf("rank %d relay to rank %d on %s: %w", me, d, host, err))
		return
	}
	pending := map[int][]staged{} // per sender, in the order handed
	var sched []batchWants
	var inflight []sent
	for {
		var head <-chan struct{}
		if len(inflight) > 0 {
			head = inflight[0].op.Done()
		}
		select {
		case st := <-ds.in:
			pending[st.from] = append(pending[st.from], st)
		case bs := <-ds.sched:
			if len(sched)+len(bs) > maxSched {
				sv.fail(fmt.Errorf("rank %d relay: rank %d announced more than %d batches ahead", me, d, maxSched))
				return
			}
			sched = append(sched, bs...)
		case <-head:
			f := inflight[0]
			inflight = inflight[1:]
			if _, err := f.op.Wait(sv.ctx); err != nil {
				sv.fail(fmt.Errorf("rank %d relay for rank %d to rank %d on %s from %s: %w", me, f.from, d, host, p.NIC(), err))
				return
			}
			if f.buf != nil {
				p.stage.Put(f.buf)
			}
			sv.credit(f.from, d)
			continue
		case <-sv.ctx.Done():
			return
		}
		due, bad := sv.due(&sched, pending)
		inflight = append(inflight, sv.sendDue(sc, due)...)
		if bad != nil {
			sv.mismatch(sc, d, *bad)
			return
		}
	}
}

// due takes, batch by batch in d's order, the chunks that are there; it
// stops at the first batch that still misses one. bad is a chunk whose
// message's length differs from the one d receives.
func (sv *service) due(sched *[]batchWants, pending map[int][]staged) (out []staged, bad *mismatched) {
	for len(*sched) > 0 {
		b := (*sched)[0]
		rest := b[:0]
		for _, w := range b {
			q := pending[w.s]
			if len(q) == 0 {
				rest = append(rest, w)
				continue
			}
			st := q[0]
			pending[w.s] = q[1:]
			if st.total != w.total {
				return out, &mismatched{st, w}
			}
			out = append(out, st)
		}
		if len(rest) > 0 {
			(*sched)[0] = rest
			return out, nil
		}
		*sched = (*sched)[1:]
	}
	return out, nil
}

// sendDue sends the chunks on the stream, tagged with their senders, in one
// wake-up of the engine.
func (sv *service) sendDue(sc net.SendConn, due []staged) []sent {
	if len(due) == 0 {
		return nil
	}
	p := sv.p
	starts := make([]func() (net.Request, error), len(due))
	for i, st := range due {
		var b []byte
		if st.buf != nil {
			b = (*st.buf)[:st.n]
		}
		tag := uint64(st.from)
		starts[i] = func() (net.Request, error) { return sc.ISend(b, tag, nil) }
		atomic.AddInt64(&p.total.Messages, 1)
		atomic.AddInt64(&p.total.Bytes, int64(st.n))
		if st.from != p.cfg.Rank {
			atomic.AddInt64(&p.total.Relayed, 1)
		}
	}
	out := make([]sent, len(due))
	for i, op := range p.eng.PostAll(sv.ctx, starts...) {
		out[i] = sent{op: op, buf: due[i].buf, from: due[i].from}
	}
	return out
}

// mismatched is a chunk handed for a message of one length where the
// destination receives another.
type mismatched struct {
	st staged
	w  want
}

// maxSched bounds the batches a destination may announce ahead of the
// chunks (a round of 1 MiB chunks per batch: far more than any call's).
const maxSched = 1 << 20

// markTimeout bounds how long a relay waits for its mismatch mark to
// leave before it fails.
const markTimeout = 5 * time.Second

// mismatch fails the stream: a message's length differs from the
// receive's. The relay sends the destination, in the chunk's place and
// tagged with its sender, a mark longer than any chunk, so that d's
// multi-receive fails at once with errs.ErrMismatch (the batch's other
// chunks will not come), and then fails the service with both lengths.
func (sv *service) mismatch(sc net.SendConn, d int, m mismatched) {
	p := sv.p
	err := fmt.Errorf("rank %d relay: rank %d's message for rank %d is %d bytes long, the receive rank %d posted for it %d bytes: %w",
		p.cfg.Rank, m.w.s, d, m.st.total, d, m.w.total, errs.ErrMismatch)
	if !sv.claim(err) { // the service failed already
		return
	}
	mark := make([]byte, p.cfg.Chunk+1) // longer than any chunk buffer (New keeps Chunk under the device's limit)
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
	op := p.eng.Post(ctx, func() (net.Request, error) { return sc.ISend(mark, uint64(m.w.s), nil) })
	op.Wait(ctx) // best effort: the report below ends the job anyway
	cancel()
	if m.st.buf != nil {
		p.stage.Put(m.st.buf)
	}
	sv.report(err)
}

// sent is a relayed chunk on its way: its send, its staging slot and its
// sender.
type sent struct {
	op   *Op
	buf  *[]byte
	from int
}
