package staged

import (
	"context"
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
)

// DefaultChunk is the staged pipeline's chunk: a call that spans more than
// two chunks (of its buffer, of each rank's block, of a send/recv message)
// is staged chunk by chunk, so the copy of chunk c+1 to the host, the host
// collective on chunk c (the wire, across hosts) and the copy of chunk c-1
// back to the device overlap.
const DefaultChunk = 4 << 20

// stages is one call cut into chunks that are independent calls of the
// host engine. in enqueues chunk c's copies to the host (nil: this rank
// copies nothing in), host runs chunk c's host collective, out enqueues
// its copies back to the device. All ranks cut a call the same way (from
// counts, types and message lengths, and the chunk, which every rank
// shares), so their per-chunk host collectives pair up.
type stages struct {
	chunks int
	in     func(c int) error
	host   func(ctx context.Context, c int) error
	out    func(c int) error
}

// pipelined reports whether o is staged chunk by chunk (pipeline.go and
// chunks.go cut it). AllToAll runs in rounds of its own (alltoall.go).
func (p *stagedPlane) pipelined(o *plane.Op) bool {
	if p.chunk <= 0 {
		return false
	}
	switch o.Kind {
	case plane.AllReduce, plane.Reduce, plane.ReduceScatter:
		return !p.wholeReductions && o.Count*o.DT.Size() > 2*p.chunk
	case plane.Broadcast, plane.AllGather:
		// Count*size is the buffer, or (allgather, reduce-scatter) each
		// rank's block: the same on every rank.
		return o.Count*o.DT.Size() > 2*p.chunk
	case plane.Group: // any one message
		for _, e := range o.P2P {
			if pieces(bufLen(e.Buf), p.chunk) > 1 {
				return true
			}
		}
	}
	return false
}

// pipeline cuts o into chunks and runs them. The staging it takes is no
// larger than the unpipelined call's: each chunk has its own part of it,
// so no chunk waits for another's copies.
func (p *stagedPlane) pipeline(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	k := cut{o: o, s: s, e: p.c.Engine(), hostGroup: p.hostGroup, rank: p.c.Rank(), size: p.c.Size(), chunk: p.chunk}
	mem, err := p.staging(k.staging())
	if err != nil {
		return p.fail(o, "pinned staging", err)
	}
	p.piped[o.Kind]++
	return p.runStages(ctx, o, s, k.stages(mem))
}

// runStages enqueues every chunk's copies to the host at once, each
// followed by an event; the host collective of chunk c starts when its
// event has fired, and the copies of its result back to the device are
// enqueued behind it while the next chunk's collective runs. Every copy
// to the host is enqueued before any copy back, so in-place calls never
// overwrite bytes still to be read.
func (p *stagedPlane) runStages(ctx context.Context, o *plane.Op, s *gpu.Stream, st stages) (err error) {
	var evs []*gpu.Event
	defer func() {
		// Every copy must be done before the staging memory is reused or
		// the events go: wait for the stream even after a failure.
		if serr := syncStream(context.WithoutCancel(ctx), s); serr != nil {
			err = errors.Join(err, p.fail(o, "copy back to the device", serr))
		}
		for _, e := range evs {
			_ = e.Close()
		}
	}()
	if st.in != nil {
		evs = make([]*gpu.Event, 0, st.chunks)
		for c := range st.chunks {
			if err := st.in(c); err != nil {
				return p.fail(o, fmt.Sprintf("copy chunk %d of %d to the host", c+1, st.chunks), err)
			}
			ev, err := p.dev.NewEvent(false)
			if err != nil {
				return p.fail(o, "staging event", err)
			}
			evs = append(evs, ev)
			if err := s.Record(ev); err != nil {
				return p.fail(o, "staging event", err)
			}
		}
	}
	for c := range st.chunks {
		if st.in != nil {
			if err := waitEvent(ctx, evs[c]); err != nil {
				return p.fail(o, fmt.Sprintf("copy chunk %d of %d to the host", c+1, st.chunks), err)
			}
		}
		if err := st.host(ctx, c); err != nil {
			return fmt.Errorf("staged chunk %d of %d: %w", c+1, st.chunks, err)
		}
		if err := st.out(c); err != nil {
			return p.fail(o, fmt.Sprintf("copy chunk %d of %d to the device", c+1, st.chunks), err)
		}
	}
	return nil
}

// waitEvent waits for e without blocking past ctx (gpu.Event.SynchronizeCtx).
func waitEvent(ctx context.Context, e *gpu.Event) error { return e.SynchronizeCtx(ctx) }
