package direct

import (
	"context"
	"encoding/binary"
	"fmt"

	"flexlink/collectives"
	"flexlink/collectives/plane"
	"flexlink/fabric"
	"flexlink/gpu"
)

// The host messages of the direct plane: "ready" and "done" per call (see
// gpu_direct.go for what they prove), "pushed" in the push allreduce.
//
// A ready message is readyHeader bytes, then one descriptor per buffer the
// peer may touch. Header words: call number, kind/dtype/op (bit 24: this
// rank pulls, gpu_direct_pull.go), count, root,
// then four words of the PCIe share (gpu_pcie_call.go): whether this rank's
// done message to the peer carries a staging table, the sequence number of
// this call's timed push to the peer (0: not timed), and this rank's report
// on the peer's last timed push to it (sequence number, nanoseconds).

// Message phases, in the first tag word.
const (
	gpuTagMagic = uint64(0x676e766c_00000000) // "gnvl"
	phaseReady  = 1
	phaseDone   = 2
	phasePushed = 3
	readyHeader = 8 * 8 // see above
	pcieWords   = 4 * 8 // header bytes 32..63: the PCIe words
)

// readyMessages builds the "ready" message for each peer and the length of
// the one expected from it: the header, then descriptors of the buffers the
// peer may touch (send and recv for a collective; for a Group, this rank's
// sends to that peer, which the peer pulls).
func (p *directPlane) readyMessages(o *plane.Op, peers []int, call uint64) (out [][]byte, inLen []int, err error) {
	out, inLen = make([][]byte, p.n), make([]int, p.n)
	hdr := make([]byte, readyHeader)
	le := binary.LittleEndian
	le.PutUint64(hdr[0:], call)
	le.PutUint64(hdr[8:], uint64(o.Kind)|uint64(o.DT)<<8|uint64(o.Op)<<16|p.readyFlags(o))
	le.PutUint64(hdr[16:], uint64(o.Count))
	le.PutUint64(hdr[24:], uint64(o.Root))
	bufs := make([][]*gpu.Buffer, p.n)
	want := make([]int, p.n)
	if o.Kind == plane.Group {
		for _, e := range o.P2P {
			if e.Send {
				bufs[e.Peer] = append(bufs[e.Peer], e.Buf)
			} else {
				want[e.Peer]++
			}
		}
	} else {
		// An allreduce also describes the scratch its peers push into (nil
		// unless this call uses the push allreduce).
		mine := []*gpu.Buffer{o.Send, o.Recv}
		if o.Kind == plane.AllReduce {
			var scr *gpu.Buffer
			if p.pushPlan(o).ok {
				scr = p.scratch
			}
			mine = append(mine, scr)
		}
		for _, j := range peers {
			bufs[j], want[j] = mine, len(mine)
		}
	}
	for _, j := range peers {
		m := make([]byte, readyHeader+len(bufs[j])*descBytes)
		copy(m, hdr)
		p.pcieReadyWords(j, m[readyHeader-pcieWords:readyHeader])
		for k, b := range bufs[j] {
			d, err := p.ipc.describe(b)
			if err != nil {
				return nil, nil, err
			}
			d.put(m[readyHeader+k*descBytes:])
		}
		out[j], inLen[j] = m, readyHeader+want[j]*descBytes
	}
	return out, inLen, nil
}

// exchange sends out[j] to and receives a message of inLen[j] bytes from
// every peer, over the Comm's host links. The tag carries the phase, the
// pair's call count and the call's signature, so ranks that disagree about
// which collective this is fail with ErrMismatch instead of mixing data.
func (p *directPlane) exchange(ctx context.Context, phase uint64, o *plane.Op, with []int, out [][]byte, inLen []int) ([][]byte, error) {
	sig := uint64(o.Kind)
	if o.Kind != plane.Group {
		sig |= uint64(o.DT)<<8 | uint64(o.Op)<<16 | uint64(o.Root)<<24 | uint64(o.Count)<<32
	}
	in := make([][]byte, p.n)
	reqs := make([]fabric.Request, 0, 2*len(with))
	lp := p.c.Peers()
	for _, j := range with {
		tag := fabric.Tag{gpuTagMagic | phase, p.c.ID(), p.pairSeq[j], sig}
		in[j] = make([]byte, inLen[j])
		reqs = append(reqs, lp.Recv(j, tag, collectives.HostBuffer(in[j])))
	}
	for _, j := range with {
		tag := fabric.Tag{gpuTagMagic | phase, p.c.ID(), p.pairSeq[j], sig}
		reqs = append(reqs, lp.Send(j, tag, collectives.HostBuffer(out[j])))
	}
	if err := fabric.WaitAll(ctx, reqs...); err != nil {
		what := map[uint64]string{phaseReady: "ready", phaseDone: "done", phasePushed: "pushed"}[phase]
		return nil, fmt.Errorf("gpu %s: %s handshake with ranks %v: %w", o.Kind, what, with, err)
	}
	return in, nil
}
