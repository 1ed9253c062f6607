package proxy

import (
	"encoding/binary"
	"fmt"

	"github.com/flexlink/flexlink/fabric/net"
)

// A destination's clear-to-send tells a relay how the destination will
// take the chunks the relay carries for it (stream.go): one message per
// Group call (several when long), on a connection of its own from the
// destination's NIC to the relay's (connCTS; the relay is on the
// destination's rail, so this path is rail-aligned too). Wire: batches
// back to back, each a u32 count n (1..net.MaxRecvs) then n members of
// u32 sender and u64 message length, little-endian.

// ctsMax bounds a clear-to-send message (the relay's receive buffer);
// its tag is ctsTag (conns.go).
const ctsMax = 16 << 10

// maxMsg bounds a message length a clear-to-send may name.
const maxMsg = 1 << 48

// encodeCTS writes bs as clear-to-send messages of at most ctsMax bytes,
// cut between batches.
func encodeCTS(bs []batch) [][]byte {
	var out [][]byte
	var cur []byte
	for _, b := range bs {
		if len(cur)+4+12*len(b.wants) > ctsMax {
			out, cur = append(out, cur), nil
		}
		cur = binary.LittleEndian.AppendUint32(cur, uint32(len(b.wants)))
		for _, w := range b.wants {
			cur = binary.LittleEndian.AppendUint32(cur, uint32(w.s))
			cur = binary.LittleEndian.AppendUint64(cur, uint64(w.total))
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// decodeCTS reads a clear-to-send message from d; every member must be a
// sender that routes to d through relay me (routes), at most once per
// batch.
func decodeCTS(b []byte, d, me int, routes func(s, d int) bool) ([]batchWants, error) {
	var out []batchWants
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, fmt.Errorf("clear-to-send from rank %d: %d bytes left, not a batch", d, len(b))
		}
		n := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if n < 1 || n > net.MaxRecvs || len(b) < 12*n {
			return nil, fmt.Errorf("clear-to-send from rank %d: a batch of %d members in %d bytes", d, n, len(b))
		}
		bw := make(batchWants, n)
		for i := range bw {
			s, total := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint64(b[4:])
			b = b[12:]
			if !routes(int(s), d) {
				return nil, fmt.Errorf("clear-to-send from rank %d names rank %d, whose messages for it do not go through relay rank %d", d, s, me)
			}
			if total > maxMsg {
				return nil, fmt.Errorf("clear-to-send from rank %d: a message of %d bytes from rank %d", d, total, s)
			}
			for _, o := range bw[:i] {
				if o.s == int(s) {
					return nil, fmt.Errorf("clear-to-send from rank %d: rank %d twice in one batch", d, s)
				}
			}
			bw[i] = want{s: int(s), total: int(total)}
		}
		out = append(out, bw)
	}
	return out, nil
}

// routesVia reports whether s's messages for d go through this rank's
// group stream: s a rank of this host (this one included), d on another,
// and this rank s's relay to d.
func (p *Proxy) routesVia(s, d int) bool {
	h, me := p.cfg.Hosts, p.cfg.Rank
	return s >= 0 && s < len(h) && d >= 0 && d < len(h) && h[s] == h[me] && h[d] != h[me] && p.cfg.Via(s, d) == me
}

// serveCTS reads the clear-to-send connections that destinations open
// to this relay.
func (sv *service) serveCTS() {
	defer sv.wg.Done()
	for {
		select {
		case k := <-sv.p.conns.cts:
			if rc := sv.p.conns.ready(k); rc != nil {
				sv.wg.Add(1)
				go sv.readCTS(k.From, rc)
			}
		case <-sv.ctx.Done():
			return
		}
	}
}

// readCTS takes destination d's clear-to-send messages, in order, into
// d's stream schedule.
func (sv *service) readCTS(d int, rc net.RecvConn) {
	defer sv.wg.Done()
	p := sv.p
	me := p.cfg.Rank
	buf := make([]byte, ctsMax)
	for {
		op := p.eng.Post(sv.ctx, func() (net.Request, error) { return rc.IRecv([][]byte{buf}, []uint64{ctsTag}, nil) })
		n, err := op.Wait(sv.ctx)
		if err != nil {
			if !sv.quiet.Load() && sv.ctx.Err() == nil {
				sv.fail(fmt.Errorf("rank %d relay: clear-to-send from rank %d on %s: %w", me, d, p.cfg.Hosts[d], err))
			}
			return
		}
		bs, err := decodeCTS(buf[:n[0]], d, me, p.routesVia)
		if err != nil {
			sv.fail(fmt.Errorf("rank %d relay: %w", me, err))
			return
		}
		select {
		case sv.streamTo(d).sched <- bs:
		case <-sv.ctx.Done():
			return
		}
	}
}

// batch is one multi-receive a destination posts on a relay's stream:
// the next chunk of each member sender, into bufs (as the destination
// cuts its receives), and which of the sender's messages it belongs to.
type batch struct {
	wants []want
	bufs  [][]byte
	msgs  []int
}

// planRecvs cuts this rank's receives from senders (each sender's
// buffers, in order) that one relay carries into batches: round k holds
// chunk k of every sender (ascending) whose messages make more than k
// chunks together (an empty message is one empty chunk), in groups of
// MaxRecvs.
func (p *Proxy) planRecvs(senders map[int][][]byte) []batch {
	type piece struct {
		buf        []byte
		total, msg int
	}
	cuts := map[int][]piece{}
	var order []int
	rounds := 0
	for s := range len(p.cfg.Hosts) {
		bufs, ok := senders[s]
		if !ok {
			continue
		}
		order = append(order, s)
		for i, b := range bufs {
			for k := range max(1, p.chunks(len(b))) {
				ch := b[:0]
				if len(b) > 0 {
					ch = p.chunk(b, k)
				}
				cuts[s] = append(cuts[s], piece{ch, len(b), i})
			}
		}
		rounds = max(rounds, len(cuts[s]))
	}
	var out []batch
	for k := range rounds {
		var cur batch
		for _, s := range order {
			if len(cuts[s]) <= k {
				continue
			}
			if len(cur.wants) == p.cfg.MaxRecvs {
				out, cur = append(out, cur), batch{}
			}
			pc := cuts[s][k]
			cur.wants = append(cur.wants, want{s: s, total: pc.total})
			cur.bufs = append(cur.bufs, pc.buf)
			cur.msgs = append(cur.msgs, pc.msg)
		}
		if len(cur.wants) > 0 {
			out = append(out, cur)
		}
	}
	return out
}
