package gpufake

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/gpu/internal/cu"
	"github.com/flexlink/flexlink/gpu/internal/cufake"
	"github.com/flexlink/flexlink/reduce"
)

// hostFlag is flexlink_flag_<op>_<dt> on the fake driver: the protocol of
// flag.cu (slots, cumulative ready and cons counters, rank-order fold,
// timeouts written to the error word), with the blocks run one after the
// other. Ranks are goroutines, so a launch blocks until the peers' launches
// have delivered their chunks, as a kernel would spin.
func hostFlag(dt dtype.DType, op dtype.Op, mode int) cufake.KernelFunc {
	return func(f *cufake.Fake, grid, _ [3]uint32, params []unsafe.Pointer) error {
		nargs := map[int]int{gpu.FlagModeAR: 10, gpu.FlagModeRS: 7, gpu.FlagModeGather: 11}[mode]
		v, err := kernelArgs(params, nargs)
		if err != nil {
			return err
		}
		if mode == gpu.FlagModeGather && v[10] != 0 {
			// The side copy (flag.cu's cdst, csrc, cbytes), first, as the
			// kernel makes it.
			if err := devCopy(f, v[8], v[9], v[10]); err != nil {
				return err
			}
		}
		root := gpu.FlagNoRoot
		switch mode {
		case gpu.FlagModeAR:
			root = v[9]
		case gpu.FlagModeGather:
			root = v[7]
		}
		var part [2]uint64 // pcount, call: no PCIe part beyond allreduce
		if mode == gpu.FlagModeAR {
			part = [2]uint64{v[7], v[8]}
		}
		v[7], v[8] = part[0], part[1]
		raw, err := f.Mem(cu.DevPtr(v[3]), gpu.FlagCtlBytes)
		if err != nil {
			return err
		}
		k := &fakeFlag{f: f, c: gpu.ParseFlagCtl(raw), dt: dt, op: op,
			a:    flagArgs{region: v[3], out: v[0], in: v[1], count: v[2], chunk: v[4], div: int(v[5]), sig: v[6], grid: uint64(grid[0])},
			m:    flagMode{mode: mode, root: -1},
			part: flagPart{call: v[8]}, poll: time.NewTicker(hostAbortPoll)}
		defer k.poll.Stop()
		if root != gpu.FlagNoRoot {
			if root >= uint64(k.c.Ranks) {
				return fmt.Errorf("flag kernel: root %d of %d ranks", root, k.c.Ranks)
			}
			k.m.root = int(root)
		}
		if mode == gpu.FlagModeGather {
			k.m.a2a, k.m.xchg, k.a.div = v[5] == gpu.GatherModeA2A, v[5] == gpu.GatherModeExchange, 0
		}
		k.deadline = time.Now().Add(time.Duration(k.c.TimeoutNs))
		if abort, err := k.word(k.a.region + gpu.FlagAbortOffset); err != nil || atomic.LoadUint64(abort) != 0 {
			return err // an earlier call failed
		}
		if ok, err := k.plan(v[7]); !ok {
			return err
		}
		k.lines = k.linesFit()
		if k.part.call != 0 && k.c.Times != 0 {
			w, err := k.word(k.c.Times + 8*gpu.FlagMaxBlocks)
			if err != nil {
				return err
			}
			k.store(w, k.part.pc)
		}
		for b := uint64(0); b < k.a.grid; b++ {
			t0 := time.Now()
			ok, err := k.block(b)
			if err != nil || !ok {
				return err
			}
			if k.part.call != 0 && k.c.Times != 0 {
				w, err := k.word(k.c.Times + 8*b)
				if err != nil {
					return err
				}
				k.store(w, k.part.call<<40|uint64(time.Since(t0).Nanoseconds())&(1<<40-1))
			}
		}
		return nil
	}
}

// fakeFlag is one launch of a flag kernel on the fake driver.
type fakeFlag struct {
	f        *cufake.Fake
	c        gpu.FlagCtl
	dt       dtype.DType
	op       dtype.Op
	deadline time.Time
	a        flagArgs
	m        flagMode
	part     flagPart
	lines    bool         // the call sends lines (flag_lines.go)
	poll     *time.Ticker // when the waits read the host's abort word (hostAbortPoll)
}

// flagArgs are a launch's buffers and sizes, as flag.cu takes them.
type flagArgs struct {
	region, out, in, count, chunk, grid, sig uint64
	div                                      int
}

// flagMode is which collective a launch runs.
type flagMode struct {
	mode      int  // gpu.FlagModeAR, gpu.FlagModeRS, gpu.FlagModeGather (flag.cu's MODE)
	a2a, xchg bool // gpu.FlagModeGather: alltoall; a two-rank exchange
	root      int  // -1, or a reduce's (gpu.FlagModeAR) or a broadcast's (gpu.FlagModeGather) root
}

// flagPart is a launch's PCIe part.
type flagPart struct {
	call, pc, pg uint64 // call number (0: none), its elements and blocks
}

// payload is flag.cu's: whether this rank's pushes to t carry data (every
// pair both ways but in a reduce or a broadcast, where the other pushes
// carry the header alone).
func (k *fakeFlag) payload(t int) bool {
	if k.m.root < 0 {
		return true
	}
	if k.m.mode == gpu.FlagModeGather {
		return k.c.Me == k.m.root
	}
	return t == k.m.root
}

// plan agrees on the PCIe part as flag.cu does: rank 0 publishes its
// pcount and signature in rank 1's plan words; rank 1 waits for them and,
// meanwhile, watches block 0's NVLink slot for a chunk of another call
// (rank 0 runs a call without a plan: a mismatch, not a wait).
func (k *fakeFlag) plan(pcount uint64) (bool, error) {
	if k.part.call == 0 {
		return true, nil
	}
	k.part.pg = uint64(k.c.HostBlocks)
	at := gpu.FlagPlanOffset + 32*(k.part.call%4)
	if k.c.Me == 0 {
		k.part.pc = pcount
		var w [3]*uint64
		for i := range w {
			var err error
			if w[i], err = k.word(k.c.Region[1] + at + 8*uint64(i)); err != nil {
				return false, err
			}
		}
		atomic.StoreUint64(w[0], pcount)
		atomic.StoreUint64(w[1], k.a.sig)
		k.store(w[2], k.part.call)
		if pcount > k.a.count {
			return false, k.fail(3, 0, 1)
		}
		return true, nil
	}
	var plan [3]*uint64
	for i := range plan {
		var err error
		if plan[i], err = k.word(k.a.region + at + 8*uint64(i)); err != nil {
			return false, err
		}
	}
	base, err := k.word(k.a.region + gpu.FlagBaseOffset)
	if err != nil {
		return false, err
	}
	b0 := atomic.LoadUint64(base)
	ready, err := k.word(k.a.region + gpu.FlagReadyOffset)
	if err != nil {
		return false, err
	}
	hdr, err := k.f.Mem(cu.DevPtr(k.slot(1, 0, false, 0, b0)), 16)
	if err != nil {
		return false, err
	}
	abort, err := k.word(k.a.region + gpu.FlagAbortOffset)
	if err != nil {
		return false, err
	}
	timer := time.NewTimer(time.Until(k.deadline))
	defer timer.Stop()
	le := binary.LittleEndian
	for {
		changed := k.f.Changed()
		switch {
		case atomic.LoadUint64(plan[2]) >= k.part.call:
			k.part.pc = atomic.LoadUint64(plan[0])
			if atomic.LoadUint64(plan[1]) != k.a.sig || k.part.pc > k.a.count {
				return false, k.fail(3, 0, 0) // rank 0 called another allreduce
			}
			return true, nil
		case atomic.LoadUint64(ready) >= b0+1 && (le.Uint64(hdr) != k.a.sig || le.Uint64(hdr[8:]) != b0):
			return false, k.fail(3, 0, 0)
		case atomic.LoadUint64(abort) != 0:
			return false, nil
		}
		select {
		case <-changed:
		case <-k.poll.C:
			if k.hostAborted() {
				return false, nil
			}
		case <-timer.C:
			return false, k.fail(2, 0, 0)
		}
	}
}

func (k *fakeFlag) word(p uint64) (*uint64, error) {
	m, err := k.f.Mem(cu.DevPtr(p), 8)
	if err != nil {
		return nil, err
	}
	return (*uint64)(unsafe.Pointer(&m[0])), nil
}

// slot is the address of a slot of block b (of its role: host blocks
// count from the first of them).
func (k *fakeFlag) slot(owner, sender int, host bool, b, seq uint64) uint64 {
	l := k.c.Layout
	if sender > owner {
		sender-- // slots for the owner's peers only
	}
	if host {
		return k.c.Host[owner] + ((uint64(sender)*uint64(k.c.HostBlocks)+b)*uint64(l.Depth)+seq%uint64(l.Depth))*uint64(k.c.HostSlot)
	}
	return k.c.Region[owner] + gpu.FlagDataOffset +
		((uint64(sender)*uint64(l.MaxBlocks)+b)*uint64(l.Depth)+seq%uint64(l.Depth))*uint64(l.SlotBytes)
}

// fail sets the region's abort word and writes the error word.
func (k *fakeFlag) fail(what, b uint64, peer int) error {
	a, err := k.word(k.a.region + gpu.FlagAbortOffset)
	if err != nil {
		return err
	}
	k.store(a, 1)
	if k.c.ErrHost == 0 {
		return nil
	}
	e, err := k.word(k.c.ErrHost)
	if err == nil {
		k.store(e, 1<<63|what<<40|b<<16|uint64(peer))
	}
	return err
}

// wait blocks until *p reaches want, woken by every write to fake memory
// (Fake.Changed); false when the deadline passes first (error word
// written) or this rank's abort word is set.
func (k *fakeFlag) wait(p uint64, want int64, what, b uint64, peer int) (bool, error) {
	w, err := k.word(p)
	if err != nil || want <= 0 {
		return err == nil, err
	}
	abort, err := k.word(k.a.region + gpu.FlagAbortOffset)
	if err != nil {
		return false, err
	}
	timer := time.NewTimer(time.Until(k.deadline))
	defer timer.Stop()
	for {
		changed := k.f.Changed() // before the checks, so no write between them is missed
		switch {
		case int64(atomic.LoadUint64(w)) >= want:
			return true, nil
		case atomic.LoadUint64(abort) != 0:
			return false, nil
		}
		select {
		case <-changed:
		case <-k.poll.C:
			if k.hostAborted() {
				return false, nil
			}
		case <-timer.C:
			return false, k.fail(what, b, peer)
		}
	}
}

// hostAbortPoll is how often a fake kernel's waits read the host's abort
// word (a kernel: every 4096 spins): no write to fake memory announces it,
// as none reaches a real kernel. One ticker per launch (its blocks run one
// after the other).
const hostAbortPoll = time.Millisecond

// hostAborted reads the host's abort word (word 2 of the error words,
// flag.cu's host_aborted).
func (k *fakeFlag) hostAborted() bool {
	if k.c.ErrHost == 0 {
		return false
	}
	w, err := k.word(k.c.ErrHost + 16)
	return err == nil && atomic.LoadUint64(w) != 0
}

// store writes a counter or flag word and wakes the waiters.
func (k *fakeFlag) store(w *uint64, v uint64) {
	atomic.StoreUint64(w, v)
	k.f.Poke()
}

// pushSource is what this rank pushes to peer t for elements lo..lo+cnt:
// those of in (of t's block, in a reduce-scatter or an alltoall), or none
// where t takes the header alone (payload).
func (k *fakeFlag) pushSource(t int, lo, cnt uint64) ([]byte, error) {
	sz := uint64(k.dt.Size())
	if !k.payload(t) {
		cnt = 0
	}
	if k.m.mode == gpu.FlagModeRS || k.m.mode == gpu.FlagModeGather && k.m.a2a {
		lo += uint64(t) * k.a.count // block t goes to rank t
	}
	return k.f.Mem(cu.DevPtr(k.a.in+lo*sz), cnt*sz)
}

func (k *fakeFlag) block(cb uint64) (bool, error) {
	n, me, sz := k.c.Ranks, k.c.Me, uint64(k.dt.Size())
	base, err := k.word(k.a.region + gpu.FlagBaseOffset + 8*cb)
	if err != nil {
		return false, err
	}
	b0 := atomic.LoadUint64(base)
	// Roles as in flag.cu: the last pg blocks take the tail of pc elements
	// through the inboxes, the others the head over NVLink.
	nvg := k.a.grid - k.part.pg
	host := cb >= nvg
	b, grid, from, length, chunk := cb, nvg, uint64(0), k.a.count-k.part.pc, k.a.chunk
	if host {
		b, grid, from, length, chunk = cb-nvg, k.part.pg, k.a.count-k.part.pc, k.part.pc, uint64(k.c.HostSlot-gpu.FlagSlotHeader)/sz
	}
	G := (length + chunk - 1) / chunk
	var nb uint64
	if G > b {
		nb = (G - b + grid - 1) / grid
	}
	rng := func(i uint64) (lo, cnt uint64) {
		lo = (b + i*grid) * chunk
		return from + lo, min(length, lo+chunk) - lo
	}
	send := func(i uint64) (bool, error) {
		seq := b0 + i
		lo, cnt := rng(i)
		for t := 0; t < n; t++ {
			if t == me {
				continue
			}
			src, err := k.pushSource(t, lo, cnt)
			if err != nil {
				return false, err
			}
			m := uint64(len(src)) / sz
			if ok, err := k.wait(k.a.region+gpu.FlagConsOffset+8*(uint64(t)*gpu.FlagMaxBlocks+cb), int64(seq+1)-int64(k.c.Layout.Depth), 1, cb, t); !ok {
				return false, err
			}
			dst, err := k.f.Mem(cu.DevPtr(k.slot(t, me, host, b, seq)), gpu.FlagSlotHeader+m*sz)
			if err != nil {
				return false, err
			}
			binary.LittleEndian.PutUint64(dst, k.a.sig)
			binary.LittleEndian.PutUint64(dst[8:], seq)
			copy(dst[gpu.FlagSlotHeader:], src)
			w, err := k.word(k.c.Region[t] + gpu.FlagReadyOffset + 8*(uint64(me)*gpu.FlagMaxBlocks+cb))
			if err != nil {
				return false, err
			}
			k.store(w, seq+1)
		}
		return true, nil
	}
	recv := func(i uint64) (bool, error) {
		seq := b0 + i
		lo, cnt := rng(i)
		if k.m.root >= 0 {
			// A reduce or broadcast checks every peer's header, data or
			// not, as flag.cu does.
			for r := 0; r < n; r++ {
				if r == me {
					continue
				}
				if _, ok, err := k.arrived(r, host, b, cb, seq, 0); !ok {
					return false, err
				}
			}
		}
		switch {
		case k.m.root >= 0 && k.m.mode == gpu.FlagModeGather:
			return k.broadcastChunk(seq, lo, cnt, b, cb)
		case k.m.root >= 0 && me != k.m.root:
			return k.consumed(seq, cb) // a reduce's non-root folds nothing
		case k.m.mode == gpu.FlagModeGather:
			return k.gatherChunk(seq, lo, cnt, host, b, cb)
		}
		mine := lo // this rank's part of the fold
		if k.m.mode == gpu.FlagModeRS {
			mine += uint64(me) * k.a.count
		}
		// Like the kernel, float16, bfloat16 and float8 fold in float32
		// and round once at the end (after avg's division).
		wide := k.dt == dtype.Float16 || k.dt == dtype.BFloat16 || k.dt.IsFloat8()
		at, asz := k.dt, sz
		if wide {
			at, asz = dtype.Float32, 4
		}
		acc := make([]byte, cnt*asz)
		for r := 0; r < n; r++ {
			var part []byte
			if r == me {
				part, err = k.f.Mem(cu.DevPtr(k.a.in+mine*sz), cnt*sz)
			} else {
				var ok bool
				if part, ok, err = k.arrived(r, host, b, cb, seq, cnt*sz); !ok {
					return false, err
				}
			}
			if err != nil {
				return false, err
			}
			if wide {
				part = widen(part, k.dt)
			}
			if r == 0 {
				copy(acc, part)
			} else if err := reduce.Reduce(acc, part, at, k.op); err != nil {
				return false, err
			}
		}
		if k.a.div > 0 {
			if err := reduce.Finish(acc, at, dtype.Avg, k.a.div); err != nil {
				return false, err
			}
		}
		dst, err := k.f.Mem(cu.DevPtr(k.a.out+lo*sz), cnt*sz)
		if err != nil {
			return false, err
		}
		if wide {
			narrow(dst, acc, k.dt)
		} else {
			copy(dst, acc)
		}
		return k.consumed(seq, cb)
	}
	if nb == 0 {
		return true, nil
	}
	if k.lines { // one chunk a block (linesFit)
		lo, cnt := rng(0)
		if ok, err := k.sendLines(cb, b0, lo, cnt); !ok {
			return false, err
		}
		if ok, err := recv(0); !ok {
			return false, err
		}
		k.store(base, b0+1)
		return true, nil
	}
	if ok, err := send(0); !ok {
		return false, err
	}
	for i := uint64(0); i < nb; i++ {
		if i+1 < nb {
			if ok, err := send(i + 1); !ok {
				return false, err
			}
		}
		if ok, err := recv(i); !ok {
			return false, err
		}
	}
	k.store(base, b0+nb)
	return true, nil
}
