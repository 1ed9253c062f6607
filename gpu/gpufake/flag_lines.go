package gpufake

// The flag mirror's lines (flag.cu, "Lines"): a call whose blocks each
// move at most one chunk of at most gpu.FlagLLPay bytes, on a grid of at
// most ctl.LLBlocks blocks and with no PCIe part, sends each chunk as
// 16-byte lines {lo32, flag, hi32, flag} into line slot seq%2 of the
// peer's region, line 0 carrying the signature. The sender also writes
// the slot's header and raises the ready counter, as the kernel does; the
// mirror's receiver waits for that counter (the kernel polls the lines
// themselves, which Go cannot do without a data race) and then checks
// every line's two flags and the signature: a line slot laid out over
// anything else, or a credit that let a sender overwrite a slot still
// being read, shows as a wrong flag here.

import (
	"encoding/binary"
	"fmt"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// linesFit reports whether a launch sends lines, as flag.cu decides: the
// same count, chunk and grid give every rank the same answer.
func (k *fakeFlag) linesFit() bool {
	sz := uint64(k.dt.Size())
	g := (k.a.count + k.a.chunk - 1) / k.a.chunk
	return k.c.LLBlocks > 0 && k.part.pg == 0 && k.part.pc == 0 && k.a.grid <= uint64(k.c.LLBlocks) &&
		g <= k.a.grid && k.a.chunk*sz <= gpu.FlagLLPay
}

// llFlag is a line slot's flag for chunk seq (flag.cu's ll_flag).
func llFlag(seq uint64) uint32 { return uint32(seq%0xffffffff) + 1 }

// lineSlot is the address of owner's line slot for sender, block b and
// chunk seq.
func (k *fakeFlag) lineSlot(owner, sender int, b, seq uint64) uint64 {
	l, n := k.c.Layout, k.c.Ranks
	if sender > owner {
		sender--
	}
	off := uint64(gpu.FlagDataOffset + (n-1)*l.MaxBlocks*l.Depth*l.SlotBytes)
	return k.c.Region[owner] + off + ((uint64(sender)*uint64(k.c.LLBlocks)+b)*2+seq%2)*gpu.FlagLLSlot
}

// putLines writes w (padded to whole lines) as lines after line 0, and
// line 0 with the signature, all with flag.
func putLines(dst []byte, sig uint64, w []byte, flag uint32) {
	le := binary.LittleEndian
	line := func(i int, v uint64) {
		le.PutUint32(dst[16*i:], uint32(v))
		le.PutUint32(dst[16*i+4:], flag)
		le.PutUint32(dst[16*i+8:], uint32(v>>32))
		le.PutUint32(dst[16*i+12:], flag)
	}
	line(0, sig)
	for i := 0; i*8 < len(w); i++ {
		var b [8]byte
		copy(b[:], w[i*8:])
		line(i+1, le.Uint64(b[:]))
	}
}

// sendLines is a line call's send of chunk seq (elements lo..lo+cnt) of
// block b to every peer, once each peer has read the slot's use before
// (cons >= seq-1: two line slots a sender and block).
func (k *fakeFlag) sendLines(b, seq, lo, cnt uint64) (bool, error) {
	n, me := k.c.Ranks, k.c.Me
	for j := 1; j < n; j++ {
		t := (me + j) % n
		if ok, err := k.wait(k.a.region+gpu.FlagConsOffset+8*(uint64(t)*gpu.FlagMaxBlocks+b), int64(seq)-1, 1, b, t); !ok {
			return false, err
		}
		src, err := k.pushSource(t, lo, cnt)
		if err != nil {
			return false, err
		}
		lines, err := k.f.Mem(cu.DevPtr(k.lineSlot(t, me, b, seq)), 16*(1+(uint64(len(src))+7)/8))
		if err != nil {
			return false, fmt.Errorf("flag kernel: line slot of rank %d: %w", t, err)
		}
		putLines(lines, k.a.sig, src, llFlag(seq))
		hdr, err := k.f.Mem(cu.DevPtr(k.slot(t, me, false, b, seq)), 16)
		if err != nil {
			return false, err
		}
		binary.LittleEndian.PutUint64(hdr, k.a.sig)
		binary.LittleEndian.PutUint64(hdr[8:], seq)
		w, err := k.word(k.c.Region[t] + gpu.FlagReadyOffset + 8*(uint64(me)*gpu.FlagMaxBlocks+b))
		if err != nil {
			return false, err
		}
		k.store(w, seq+1)
	}
	return true, nil
}

// linesArrived is arrived for a line call: peer r's chunk seq of block b
// (nbytes of data), out of its lines, every flag and the signature
// checked (a wrong one is a mismatch, as flag.cu records it).
func (k *fakeFlag) linesArrived(r int, b, seq, nbytes uint64) ([]byte, bool, error) {
	if ok, err := k.wait(k.a.region+gpu.FlagReadyOffset+8*(uint64(r)*gpu.FlagMaxBlocks+b), int64(seq+1), 2, b, r); !ok {
		return nil, false, err
	}
	nl := 1 + (nbytes+7)/8
	lines, err := k.f.Mem(cu.DevPtr(k.lineSlot(k.c.Me, r, b, seq)), 16*nl)
	if err != nil {
		return nil, false, err
	}
	le, flag := binary.LittleEndian, llFlag(seq)
	out := make([]byte, 8*(nl-1))
	for i := range nl {
		ln := lines[16*i:]
		if le.Uint32(ln[4:]) != flag || le.Uint32(ln[12:]) != flag {
			return nil, false, k.fail(3, b, r) // not this chunk's line: the peer sent slots, or a slot was overwritten
		}
		v := uint64(le.Uint32(ln)) | uint64(le.Uint32(ln[8:]))<<32
		if i == 0 {
			if v != k.a.sig {
				return nil, false, k.fail(3, b, r)
			}
			continue
		}
		le.PutUint64(out[8*(i-1):], v)
	}
	return out[:nbytes], true, nil
}
