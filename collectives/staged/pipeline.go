package staged

import (
	"context"
	"errors"
	"fmt"
	"time"

	"flexlink/collectives"
	"flexlink/collectives/plane"
	"flexlink/gpu"
	"flexlink/internal/errs"
)

// DefaultChunk is the staged pipeline's chunk: allreduces and broadcasts
// of more than two chunks are staged chunk by chunk, so the copy of chunk
// c+1 to the host, the host collective on chunk c (the wire, across
// hosts) and the copy of chunk c-1 back to the device overlap.
const DefaultChunk = 4 << 20

// pipelined reports whether o is staged chunk by chunk: collectives whose
// chunks are independent collectives of the same kind (element-wise
// reductions, broadcasts) and that span more than two chunks.
func (p *stagedPlane) pipelined(o *plane.Op) bool {
	switch o.Kind {
	case plane.AllReduce, plane.Broadcast:
		return p.chunk > 0 && o.Count*o.DT.Size() > 2*p.chunk
	}
	return false
}

// pipeline runs o in chunks. Every copy to the host is enqueued at once,
// each followed by an event; the host collective of chunk c starts when
// its event has fired, and the copy of its result back to the device is
// enqueued behind it while the next chunk's collective runs. All ranks cut
// o the same way (the chunk depends on the count and type only), so their
// host collectives pair up chunk by chunk.
func (p *stagedPlane) pipeline(ctx context.Context, o *plane.Op, s *gpu.Stream) (err error) {
	sz := o.DT.Size()
	n := o.Count * sz
	per := max(1, p.chunk/sz) * sz // bytes per chunk, whole elements
	chunks := (n + per - 1) / per
	sb := n
	if o.Kind == plane.Broadcast {
		sb = 0 // in place in recv's staging
	}
	mem, err := p.staging(sb + n)
	if err != nil {
		return err
	}
	hs, hr := mem[:sb], mem[sb:]
	span := func(c int) (int, int) { return c * per, min(per, n-c*per) }
	from := o.Send // the buffer copied to the host (nil: this rank copies nothing)
	if o.Kind == plane.Broadcast && o.Root != p.c.Rank() {
		from = nil
	}
	evs := make([]*gpu.Event, 0, chunks)
	defer func() {
		// Every copy must be done before the staging memory is reused or
		// the events go: wait for the stream even after a failure.
		err = errors.Join(err, syncStream(context.WithoutCancel(ctx), s))
		for _, e := range evs {
			e.Close()
		}
	}()
	if from != nil {
		into := hs
		if o.Kind == plane.Broadcast {
			into = hr
		}
		for c := range chunks {
			off, ln := span(c)
			if err := s.CopyDtoH(into[off:off+ln], from.Sub(off, ln)); err != nil {
				return err
			}
			ev, err := p.dev.NewEvent(false)
			if err != nil {
				return err
			}
			evs = append(evs, ev)
			if err := s.Record(ev); err != nil {
				return err
			}
		}
	}
	e := p.c.Engine()
	for c := range chunks {
		off, ln := span(c)
		if from != nil {
			if err := waitEvent(ctx, evs[c]); err != nil {
				return err
			}
		}
		cnt := ln / sz
		switch o.Kind {
		case plane.AllReduce:
			err = e.AllReduce(ctx, collectives.HostBuffer(hs[off:off+ln]), collectives.HostBuffer(hr[off:off+ln]), cnt, o.DT, o.Op)
		case plane.Broadcast:
			b := collectives.HostBuffer(hr[off : off+ln])
			err = e.Broadcast(ctx, b, b, cnt, o.DT, o.Root)
		}
		if err != nil {
			return fmt.Errorf("staged chunk %d of %d: %w", c+1, chunks, err)
		}
		if o.Recv != nil {
			if err := s.CopyHtoD(o.Recv.Sub(off, ln), hr[off:off+ln]); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitEvent waits for e without blocking past ctx, as syncStream does for
// a stream.
func waitEvent(ctx context.Context, e *gpu.Event) error {
	pause := time.Microsecond
	for i := 0; ; i++ {
		done, err := e.Done()
		if err != nil || done {
			return err
		}
		if i >= 64 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("staged copy to the host still running: %w (%w)", ctx.Err(), errs.ErrTimeout)
			case <-time.After(pause):
			}
			pause = min(2*pause, time.Millisecond)
		}
	}
}
