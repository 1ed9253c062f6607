package gpufake

// The flag mirror, continued: element widening and the per-chunk steps of
// the gather (allgather, alltoall, exchange) and broadcast kernels.

import (
	"encoding/binary"
	"math"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// widen converts float16, bfloat16 or float8 elements to float32 (exact).
func widen(b []byte, dt dtype.DType) []byte {
	le := binary.LittleEndian
	sz := dt.Size()
	out := make([]byte, len(b)/sz*4)
	for i := 0; i+sz <= len(b); i += sz {
		var f float32
		switch dt {
		case dtype.Float16:
			f = dtype.Float16ToFloat32(le.Uint16(b[i:]))
		case dtype.BFloat16:
			f = dtype.BFloat16ToFloat32(le.Uint16(b[i:]))
		case dtype.Float8E4M3:
			f = dtype.F8E4M3ToFloat32(b[i])
		case dtype.Float8E5M2:
			f = dtype.F8E5M2ToFloat32(b[i])
		}
		le.PutUint32(out[i/sz*4:], math.Float32bits(f))
	}
	return out
}

// narrow rounds float32 elements of src to dt (float16, bfloat16 or
// float8, saturating) into dst.
func narrow(dst, src []byte, dt dtype.DType) {
	le := binary.LittleEndian
	for i := 0; i+3 < len(src); i += 4 {
		f := math.Float32frombits(le.Uint32(src[i:]))
		switch dt {
		case dtype.Float16:
			le.PutUint16(dst[i/2:], dtype.Float32ToFloat16(f))
		case dtype.BFloat16:
			le.PutUint16(dst[i/2:], dtype.Float32ToBFloat16(f))
		case dtype.Float8E4M3:
			dst[i/4] = dtype.Float32ToF8E4M3(f)
		case dtype.Float8E5M2:
			dst[i/4] = dtype.Float32ToF8E5M2(f)
		}
	}
}

// gatherChunk is a flag allgather's or alltoall's step for one chunk
// (bytes lo..lo+cnt of every block): the peers' parts out of their slots
// into their blocks of out, this rank's own part out of in.
func (k *fakeFlag) gatherChunk(seq, lo, cnt uint64, host bool, b, cb uint64) (bool, error) {
	n, me := k.c.Ranks, k.c.Me
	for r := 0; r < n; r++ {
		if r == me && k.m.xchg {
			continue // an exchange's out holds the peer's bytes only
		}
		at := uint64(r) * k.a.count
		if k.m.xchg {
			at = 0
		}
		dst, err := k.f.Mem(cu.DevPtr(k.a.out+at+lo), cnt)
		if err != nil {
			return false, err
		}
		if r == me {
			at := lo
			if k.m.a2a {
				at += uint64(me) * k.a.count
			}
			src, err := k.f.Mem(cu.DevPtr(k.a.in+at), cnt)
			if err != nil {
				return false, err
			}
			copy(dst, src)
			continue
		}
		part, ok, err := k.arrived(r, host, b, cb, seq, cnt)
		if !ok {
			return false, err
		}
		copy(dst, part)
	}
	return k.consumed(seq, cb)
}

// arrived waits for peer r's chunk seq of block cb (b among its role's
// blocks) and returns its n bytes of data after checking the slot header
// (signature and step; a mismatch is recorded as flag.cu records it).
func (k *fakeFlag) arrived(r int, host bool, b, cb, seq, n uint64) ([]byte, bool, error) {
	if k.lines {
		return k.linesArrived(r, cb, seq, n)
	}
	if ok, err := k.wait(k.a.region+gpu.FlagReadyOffset+8*(uint64(r)*gpu.FlagMaxBlocks+cb), int64(seq+1), 2, cb, r); !ok {
		return nil, false, err
	}
	part, err := k.f.Mem(cu.DevPtr(k.slot(k.c.Me, r, host, b, seq)), gpu.FlagSlotHeader+n)
	if err != nil {
		return nil, false, err
	}
	if binary.LittleEndian.Uint64(part) != k.a.sig || binary.LittleEndian.Uint64(part[8:]) != seq {
		return nil, false, k.fail(3, cb, r)
	}
	return part[gpu.FlagSlotHeader:], true, nil
}

// broadcastChunk is a flag broadcast's step for one chunk (bytes lo..lo+cnt):
// root's in into out on root, root's chunk out of its slot elsewhere.
func (k *fakeFlag) broadcastChunk(seq, lo, cnt, b, cb uint64) (bool, error) {
	dst, err := k.f.Mem(cu.DevPtr(k.a.out+lo), cnt)
	if err != nil {
		return false, err
	}
	r := k.m.root
	if k.c.Me == r {
		src, err := k.f.Mem(cu.DevPtr(k.a.in+lo), cnt)
		if err != nil {
			return false, err
		}
		copy(dst, src)
		return k.consumed(seq, cb)
	}
	part, ok, err := k.arrived(r, false, b, cb, seq, cnt)
	if !ok {
		return false, err
	}
	copy(dst, part)
	return k.consumed(seq, cb)
}

// consumed raises every sender's cons counter of block cb to seq+1.
func (k *fakeFlag) consumed(seq, cb uint64) (bool, error) {
	for s := 0; s < k.c.Ranks; s++ {
		if s == k.c.Me {
			continue
		}
		w, err := k.word(k.c.Region[s] + gpu.FlagConsOffset + 8*(uint64(k.c.Me)*gpu.FlagMaxBlocks+cb))
		if err != nil {
			return false, err
		}
		k.store(w, seq+1)
	}
	return true, nil
}
