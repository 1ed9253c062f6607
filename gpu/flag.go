package gpu

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu/internal/cu"
)

// The flag allreduce (kernels/flag.cu): one kernel per call moves and
// reduces a vector across the ranks of one host with no host messages in
// between. Each rank owns a flag region of device memory that every peer
// has mapped; the kernel pushes this rank's part of each chunk into the
// peers' slots with SM stores over NVLink, raises a counter in the peer's
// region, waits for the peers' counters in its own, and folds all ranks'
// parts in rank order (the same bits on every rank). The offsets below are
// those of flag.cu.

const (
	// FlagMaxRanks and FlagMaxBlocks bound a region's counter arrays.
	FlagMaxRanks  = 8
	FlagMaxBlocks = 160
	// FlagBlock is the flag kernels' block size.
	FlagBlock = 512

	// The region layout of flag.cu (exported for the fake driver's mirror,
	// gpu/gpufake). FlagReadyOffset is where a region's ready counters start
	// (ready[sender][block], 64-bit, FlagMaxBlocks per sender); FlagAbortOffset
	// is its abort word: the host sets it (any non-zero value) to end this
	// rank's flag kernels.
	FlagReadyOffset = 4096
	FlagConsOffset  = FlagReadyOffset + 8*FlagMaxRanks*FlagMaxBlocks
	FlagBaseOffset  = FlagConsOffset + 8*FlagMaxRanks*FlagMaxBlocks
	FlagAbortOffset = FlagBaseOffset + 8*FlagMaxBlocks
	FlagPlanOffset  = 26 * 1024 // plan[4]{pcount, sig, call, 0}: rank 0's PCIe split, written into rank 1's region
	FlagDataOffset  = 65536
	// FlagSlotHeader is the bytes of each slot before its chunk (the
	// call's signature).
	FlagSlotHeader = 256
	FlagCtlBytes   = (15 + FlagMaxRanks + 4) * 8
	// FlagLLPay is a line slot's payload (flag.cu's FLAG_LL_PAY) and
	// FlagLLSlot its bytes: lines of 16 bytes carry 8, after a header line.
	FlagLLPay  = 8 << 10
	FlagLLSlot = 2*FlagLLPay + FlagSlotHeader
	// flagLLPeerBlocks is the line slots' blocks times peers a region
	// holds at most (128 blocks with two ranks, 42 with four, 18 with
	// eight): line calls up to 1 MiB per peer with two ranks. Measured on
	// 2xH200 (docs/PERF.md, "Two H200s, twentieth session"): with 16
	// (128 KiB) replayed calls of 256 KiB-1 MiB took 1.3-1.6x NCCL's time
	// (the step to the slots and their fences); with 64, 0.9-1.1x; with
	// 128 replays of 1-2 MiB 2-13% faster again, the rest alike.
	flagLLPeerBlocks = 128
)

// FlagLayout is the shape of every rank's flag region; all ranks of a
// communicator must use the same one.
type FlagLayout struct {
	SlotBytes int // bytes of one slot, a multiple of 256
	Depth     int // slots per sender and block (at least 2)
	MaxBlocks int // largest grid, at most FlagMaxBlocks
}

// Check reports what is wrong with l, if anything.
func (l FlagLayout) Check() error {
	if l.SlotBytes < FlagSlotHeader+256 || l.SlotBytes%256 != 0 || l.Depth < 2 || l.MaxBlocks < 1 || l.MaxBlocks > FlagMaxBlocks {
		return fmt.Errorf("gpu: flag layout %+v: want slots of a multiple of 256 bytes, at least %d, depth >= 2, 1 to %d blocks", l, FlagSlotHeader+256, FlagMaxBlocks)
	}
	return nil
}

// RegionBytes is the size of one rank's region for n ranks: the slots for
// the n-1 peers, then their line slots (two per peer and line block).
func (l FlagLayout) RegionBytes(n int) int {
	return FlagDataOffset + (n-1)*l.MaxBlocks*l.Depth*l.SlotBytes + (n-1)*l.LLBlocks(n)*2*FlagLLSlot
}

// LLBlocks is how many blocks of a call may send lines (flag.cu, "Lines")
// in a region of layout l for n ranks: a call of at most LLBlocks blocks
// of one chunk of at most FlagLLPay bytes each.
func (l FlagLayout) LLBlocks(n int) int {
	if n < 2 {
		return 0
	}
	return min(l.MaxBlocks, max(2, flagLLPeerBlocks/(n-1)))
}

// FlagCtl is a region's control block, written by the host once the peers'
// regions are mapped.
type FlagCtl struct {
	Region    [FlagMaxRanks]uint64 // rank j's region as mapped on this device (own for me)
	ErrHost   uint64               // device address of the host-mapped error word (0: none)
	TimeoutNs uint64               // how long a wait inside the kernel may take
	Layout    FlagLayout
	Ranks, Me int

	// The PCIe part (two ranks): rank j's inbox (pinned shared host
	// memory) as mapped here, its slots' size and how many blocks use them,
	// and the device address of a host-mapped array of FlagMaxBlocks words
	// where each block writes its time (FlagTimes). Zero: no PCIe part.
	Host       [FlagMaxRanks]uint64
	HostSlot   int
	HostBlocks int
	Times      uint64

	// LLBlocks: calls of at most this many blocks may send lines
	// (Layout.LLBlocks(Ranks) or 0: none).
	LLBlocks int
}

// InboxBytes is the size of one rank's PCIe inbox for n ranks.
func (c FlagCtl) InboxBytes(n int) int {
	return (n - 1) * c.HostBlocks * c.Layout.Depth * c.HostSlot
}

// Bytes encodes c as flag.cu's struct FlagCtl.
func (c FlagCtl) Bytes() []byte {
	b := make([]byte, FlagCtlBytes)
	le := binary.LittleEndian
	for j, r := range c.Region {
		le.PutUint64(b[8*j:], r)
	}
	for i, v := range []uint64{c.ErrHost, c.TimeoutNs, uint64(c.Layout.SlotBytes), uint64(c.Layout.Depth),
		uint64(c.Layout.MaxBlocks), uint64(c.Ranks), uint64(c.Me)} {
		le.PutUint64(b[8*(FlagMaxRanks+i):], v)
	}
	for j, h := range c.Host {
		le.PutUint64(b[8*(FlagMaxRanks+7+j):], h)
	}
	for i, v := range []uint64{uint64(c.HostSlot), uint64(c.HostBlocks), c.Times, uint64(c.LLBlocks)} {
		le.PutUint64(b[8*(2*FlagMaxRanks+7+i):], v)
	}
	return b
}

// ParseFlagCtl decodes Bytes (the fake driver reads the control block the
// host wrote).
func ParseFlagCtl(b []byte) FlagCtl {
	le := binary.LittleEndian
	var c FlagCtl
	for j := range c.Region {
		c.Region[j] = le.Uint64(b[8*j:])
	}
	w := func(i int) uint64 { return le.Uint64(b[8*(FlagMaxRanks+i):]) }
	c.ErrHost, c.TimeoutNs = w(0), w(1)
	c.Layout = FlagLayout{SlotBytes: int(w(2)), Depth: int(w(3)), MaxBlocks: int(w(4))}
	c.Ranks, c.Me = int(w(5)), int(w(6))
	for j := range c.Host {
		c.Host[j] = w(7 + j)
	}
	c.HostSlot, c.HostBlocks, c.Times = int(w(7+FlagMaxRanks)), int(w(8+FlagMaxRanks)), w(9+FlagMaxRanks)
	c.LLBlocks = int(w(10 + FlagMaxRanks))
	return c
}

// FlagError decodes a non-zero error word written by a flag kernel.
type FlagError struct {
	Peer  int // the rank waited for or disagreed with
	Block int // the block that gave up
	What  int // 1: timed out waiting for room in the peer's slots, 2: for its data, 3: the peer's call differs
}

// DecodeFlagError reads an error word; ok is false for 0 (no error).
func DecodeFlagError(w uint64) (e FlagError, ok bool) {
	if w>>63 == 0 {
		return e, false
	}
	return FlagError{Peer: int(w & 0xffff), Block: int(w >> 16 & 0xffffff), What: int(w >> 40 & 0xff)}, true
}

// FlagKernelName is the flag allreduce kernel for dt and op (Avg: Sum's).
func FlagKernelName(dt dtype.DType, op dtype.Op) string {
	if op == dtype.Avg {
		op = dtype.Sum
	}
	return kernelPrefix + "flag_" + op.String() + "_" + kernelType(dt)
}

// FlagAllReduce enqueues one flag allreduce of count elements: out = the
// fold of every rank's in, in chunks of chunk elements (chunk × size a
// multiple of 256 bytes and at most the layout's slot less its header)
// over grid blocks. Every rank must enqueue the same call (count, dt, op,
// chunk, grid); a rank whose peer's chunks carry another signature
// (FlagSignature) records the mismatch in the error word. A rank's flag
// calls must run one after the other (the caller orders them). region is
// this rank's region; Avg divides by ranks. pc describes the call's PCIe
// part (the zero value: none).
func (s *Stream) FlagAllReduce(out, in *Buffer, count int, dt dtype.DType, op dtype.Op, region *Buffer, l FlagLayout, chunk, grid, ranks int, pc FlagPCIe) error {
	return s.flagAllReduce(FlagAllReduceKind, out, in, count, dt, op, region, l, chunk, grid, ranks, pc)
}

// FlagTwoShotTail is FlagAllReduce (no PCIe part) for the elements past
// the last whole block of a two-shot allreduce: its chunks carry
// FlagTwoShotTailKind, so a rank making a plain allreduce of the same count
// meanwhile is caught.
func (s *Stream) FlagTwoShotTail(out, in *Buffer, count int, dt dtype.DType, op dtype.Op, region *Buffer, l FlagLayout, chunk, grid, ranks int) error {
	return s.flagAllReduce(FlagTwoShotTailKind, out, in, count, dt, op, region, l, chunk, grid, ranks, FlagPCIe{})
}

func (s *Stream) flagAllReduce(kind FlagKind, out, in *Buffer, count int, dt dtype.DType, op dtype.Op, region *Buffer, l FlagLayout, chunk, grid, ranks int, pc FlagPCIe) error {
	what := func() string { return fmt.Sprintf("flag allreduce %d %s %s", count, dt, op) }
	if !dt.Valid() || !op.Valid() {
		return fmt.Errorf("%s: %s: unknown dtype or op", s.dev, what())
	}
	if err := s.operands(what, count*dt.Size(), count, out, in); err != nil || count == 0 {
		return err
	}
	if err := s.flagCheck(what, region, l, chunk*dt.Size(), grid, ranks); err != nil {
		return err
	}
	pcount := uint64(0)
	if pc.Call != 0 {
		switch {
		case ranks != 2 || pc.Blocks < 1 || grid+pc.Blocks > FlagMaxBlocks:
			return fmt.Errorf("%s: %s: a PCIe part of %d blocks beside %d: want two ranks and at most %d blocks in all", s.dev, what(), pc.Blocks, grid, FlagMaxBlocks)
		case pc.Count < 0:
			pcount = ^uint64(0) // rank 1: rank 0's kernel says
		case pc.Count > count || pc.Count > 0 && (count-pc.Count)*dt.Size()%256 != 0:
			return fmt.Errorf("%s: %s: a PCIe part of %d elements: want at most the count, the head a multiple of 256 bytes", s.dev, what(), pc.Count)
		default:
			pcount = uint64(pc.Count)
		}
		grid += pc.Blocks
	}
	return s.launchFold(kind, out, in, count, dt, op, region, chunk, grid, ranks, pcount, pc.Call, FlagNoRoot)
}

// FlagNoRoot is the root argument of the symmetric flag calls.
const FlagNoRoot = ^uint64(0)

// FlagReduce enqueues one flag reduce: root's out (count elements) = the
// fold of every rank's in, as FlagAllReduce computes it; the other ranks
// push their in to root and never write their out (pass any buffer of
// count elements there, in itself for one). Chunks, grid and ordering as
// FlagAllReduce; every rank must name the same root.
func (s *Stream) FlagReduce(out, in *Buffer, count int, dt dtype.DType, op dtype.Op, root int, region *Buffer, l FlagLayout, chunk, grid, ranks int) error {
	what := func() string { return fmt.Sprintf("flag reduce %d %s %s root %d", count, dt, op, root) }
	if !dt.Valid() || !op.Valid() || root < 0 || root >= ranks {
		return fmt.Errorf("%s: %s: unknown dtype or op, or root not one of %d ranks", s.dev, what(), ranks)
	}
	if err := s.operands(what, count*dt.Size(), count, out, in); err != nil || count == 0 {
		return err
	}
	if err := s.flagCheck(what, region, l, chunk*dt.Size(), grid, ranks); err != nil {
		return err
	}
	return s.launchFold(FlagReduceKind, out, in, count, dt, op, region, chunk, grid, ranks, 0, 0, uint64(root))
}

// launchFold launches a flag allreduce or reduce-scatter kernel (extra:
// the allreduce's PCIe arguments).
func (s *Stream) launchFold(kind FlagKind, out, in *Buffer, count int, dt dtype.DType, op dtype.Op, region *Buffer, chunk, grid, ranks int, extra ...uint64) error {
	k, _, err := s.dev.typeKernels(dt)
	if err != nil {
		return err
	}
	f := k.flag[opIndex(op)]
	if kind == FlagReduceScatterKind || kind == FlagTwoShotRSKind {
		f = k.flagrs[opIndex(op)]
	}
	div := 0
	if op == dtype.Avg && ranks > 1 {
		div = ranks
	}
	sig := FlagSignature(kind, count, dt, op)
	if kind == FlagReduceKind {
		sig = FlagRootedSignature(kind, count, dt, op, int(extra[2])) // extra: pcount, call, root
	}
	// On the stack (Launch copies them): seven, then extra's at most three.
	args := [10]uint64{uint64(out.ptr), uint64(in.ptr), uint64(count), uint64(region.ptr), uint64(chunk), uint64(div), sig}
	n := 7 + copy(args[7:], extra)
	return s.Launch(f, [3]uint32{uint32(grid), 1, 1}, [3]uint32{FlagBlock, 1, 1}, args[:n]...)
}

// FlagPCIe is a flag call's PCIe part (two ranks, a control block with
// HostBlocks = Blocks): Blocks more blocks move the last Count elements
// through the inboxes. Rank 0 chooses Count; rank 1 passes -1 and its
// kernel takes rank 0's. Call (non-zero) numbers the call; both ranks
// must number their flag calls alike.
type FlagPCIe struct {
	Count  int
	Blocks int
	Call   uint64
}

// FlagTime decodes a word a flag kernel wrote into its times array: the
// call's number and the block's time in nanoseconds.
func FlagTime(w uint64) (call uint64, ns int64) {
	return w >> 40, int64(w & (1<<40 - 1))
}

// FlagSignature is what a flag call stamps on its chunks: the collective
// (FlagAllReduceKind...), count, dtype and op (never 0 for a non-empty call).
func FlagSignature(kind FlagKind, count int, dt dtype.DType, op dtype.Op) uint64 {
	return uint64(count)<<20 | uint64(kind)<<16 | uint64(dt)<<8 | uint64(op)
}

// FlagRootedSignature is FlagSignature for a reduce, broadcast or one-way
// send/recv: it names the root too (in the op's byte, above the op), so
// ranks that disagree on it fail with the mismatch error.
func FlagRootedSignature(kind FlagKind, count int, dt dtype.DType, op dtype.Op, root int) uint64 {
	return FlagSignature(kind, count, dt, op) | uint64(root+1)<<4
}

// FlagKind names the collective of a flag call (in its signature).
type FlagKind int

const (
	FlagAllReduceKind FlagKind = iota
	FlagReduceScatterKind
	FlagAllGatherKind
	FlagAllToAllKind
	// The three parts of a two-shot allreduce (more than two ranks): a
	// reduce-scatter, an allgather and the tail, each under a kind of its
	// own, so ranks that call the collectives themselves are not taken for
	// ranks in a two-shot allreduce.
	FlagTwoShotRSKind
	FlagTwoShotAGKind
	FlagTwoShotTailKind
	FlagReduceKind
	FlagBroadcastKind
	FlagSendRecvKind
	FlagExchangeKind
)

// The kernel modes of flag.cu (and of the fake driver's mirror).
const (
	FlagModeAR = iota
	FlagModeRS
	FlagModeGather
)

// FlagRSKernelName is the flag reduce-scatter kernel for dt and op (Avg:
// Sum's); FlagGatherKernelName the flag allgather and alltoall (bytes).
func FlagRSKernelName(dt dtype.DType, op dtype.Op) string {
	if op == dtype.Avg {
		op = dtype.Sum
	}
	return kernelPrefix + "flagrs_" + op.String() + "_" + kernelType(dt)
}

const FlagGatherKernelName = kernelPrefix + "flag_gather"

// flagCheck checks what every flag call shares: its layout, region, chunk
// (bytes cb) and grid.
func (s *Stream) flagCheck(what func() string, region *Buffer, l FlagLayout, cb, grid, ranks int) error {
	if err := l.Check(); err != nil {
		return err
	}
	if region.dev != s.dev || ranks < 1 || ranks > FlagMaxRanks || region.n < l.RegionBytes(ranks) {
		return fmt.Errorf("%s: %s: region is not a flag region of %d ranks on this device", s.dev, what(), ranks)
	}
	if cb <= 0 || cb%256 != 0 || cb > l.SlotBytes-FlagSlotHeader || grid < 1 || grid > l.MaxBlocks {
		return fmt.Errorf("%s: %s: chunk %d bytes, grid %d: want chunks of a multiple of 256 bytes up to a slot and 1 to %d blocks", s.dev, what(), cb, grid, l.MaxBlocks)
	}
	return nil
}

// FlagReduceScatter enqueues one flag reduce-scatter: in holds ranks
// blocks of count elements, out (count elements) = the fold of every
// rank's block me. Chunks, grid and ordering as FlagAllReduce.
func (s *Stream) FlagReduceScatter(out, in *Buffer, count int, dt dtype.DType, op dtype.Op, region *Buffer, l FlagLayout, chunk, grid, ranks int) error {
	return s.flagReduceScatter(FlagReduceScatterKind, out, in, count, dt, op, region, l, chunk, grid, ranks)
}

// FlagTwoShotReduceScatter is FlagReduceScatter as the first part of a
// two-shot allreduce (its chunks carry FlagTwoShotRSKind).
func (s *Stream) FlagTwoShotReduceScatter(out, in *Buffer, count int, dt dtype.DType, op dtype.Op, region *Buffer, l FlagLayout, chunk, grid, ranks int) error {
	return s.flagReduceScatter(FlagTwoShotRSKind, out, in, count, dt, op, region, l, chunk, grid, ranks)
}

func (s *Stream) flagReduceScatter(kind FlagKind, out, in *Buffer, count int, dt dtype.DType, op dtype.Op, region *Buffer, l FlagLayout, chunk, grid, ranks int) error {
	what := func() string { return fmt.Sprintf("flag reduce-scatter %d %s %s", count, dt, op) }
	if !dt.Valid() || !op.Valid() {
		return fmt.Errorf("%s: %s: unknown dtype or op", s.dev, what())
	}
	if err := s.operands(what, count*dt.Size(), count, out); err != nil || count == 0 {
		return err
	}
	if err := s.operands(what, ranks*count*dt.Size(), count, in); err != nil {
		return err
	}
	if err := s.flagCheck(what, region, l, chunk*dt.Size(), grid, ranks); err != nil {
		return err
	}
	return s.launchFold(kind, out, in, count, dt, op, region, chunk, grid, ranks)
}

// FlagGather enqueues one flag allgather (a2a false: in holds count bytes,
// out ranks blocks of them) or alltoall (a2a: in and out hold ranks blocks
// of count bytes; block t of in goes to rank t). count and chunk are
// bytes. Grid and ordering as FlagAllReduce.
func (s *Stream) FlagGather(out, in *Buffer, count int, a2a bool, region *Buffer, l FlagLayout, chunk, grid, ranks int) error {
	kind := FlagAllGatherKind
	if a2a {
		kind = FlagAllToAllKind
	}
	return s.flagGather(kind, out, in, count, region, l, chunk, grid, ranks)
}

// FlagTwoShotGather is FlagGather (an allgather) as the second part of a
// two-shot allreduce (its chunks carry FlagTwoShotAGKind).
func (s *Stream) FlagTwoShotGather(out, in *Buffer, count int, region *Buffer, l FlagLayout, chunk, grid, ranks int) error {
	return s.flagGather(FlagTwoShotAGKind, out, in, count, region, l, chunk, grid, ranks)
}

func (s *Stream) flagGather(kind FlagKind, out, in *Buffer, count int, region *Buffer, l FlagLayout, chunk, grid, ranks int) error {
	a2a := kind == FlagAllToAllKind
	coll, inBytes := "allgather", count
	if a2a {
		coll, inBytes = "alltoall", ranks*count
	}
	what := func() string { return fmt.Sprintf("flag %s %d bytes", coll, count) }
	if err := s.operands(what, ranks*count, count, out); err != nil || count == 0 {
		return err
	}
	if err := s.operands(what, inBytes, count, in); err != nil {
		return err
	}
	if err := s.flagCheck(what, region, l, chunk, grid, ranks); err != nil {
		return err
	}
	mode := GatherModeAll
	if a2a {
		mode = GatherModeA2A
	}
	return s.launchGather(out, in, count, region, chunk, grid, mode, FlagSignature(kind, count, dtype.Uint8, dtype.Sum), FlagNoRoot, SideCopy{})
}

// SideCopy is a copy on the caller's GPU that a flag send/receive or
// exchange kernel makes besides its transfer (a group's send and receive
// to the rank itself), before it meets the peer: Src's bytes into Dst,
// both of one length (the zero SideCopy: none).
type SideCopy struct{ Dst, Src *Buffer }

// check reports a side copy that is not one of two buffers of s's device
// of equal length.
func (c SideCopy) check(s *Stream, what func() string) error {
	if c.Dst == nil && c.Src == nil {
		return nil
	}
	if c.Dst == nil || c.Src == nil || c.Dst.dev != s.dev || c.Src.dev != s.dev || c.Dst.n != c.Src.n || c.Dst.n == 0 {
		return fmt.Errorf("%s: %s: the copy to itself wants two buffers of %s of one nonzero length", s.dev, what(), s.dev)
	}
	return nil
}

// alone makes the side copy of a call with nothing to send (CopyLocal;
// none when c is the zero SideCopy).
func (c SideCopy) alone(s *Stream, what func() string) error {
	if c.Dst == nil && c.Src == nil {
		return nil
	}
	if err := c.check(s, what); err != nil {
		return err
	}
	return s.CopyLocal(c.Dst, c.Src)
}

// The gather kernel's a2a argument (flag.cu): allgather, alltoall, or a
// two-rank exchange.
const (
	GatherModeAll = iota
	GatherModeA2A
	GatherModeExchange
)

// launchGather launches the gather kernel (flexlink_flag_gather) once the
// caller has checked its operands.
func (s *Stream) launchGather(out, in *Buffer, count int, region *Buffer, chunk, grid, mode int, sig, root uint64, side SideCopy) error {
	k, _, err := s.dev.commonKernels()
	if err != nil {
		return err
	}
	var cdst, csrc, cn uint64
	if side.Dst != nil {
		cdst, csrc, cn = uint64(side.Dst.ptr), uint64(side.Src.ptr), uint64(side.Dst.n)
	}
	return s.Launch(k.gather, [3]uint32{uint32(grid), 1, 1}, [3]uint32{FlagBlock, 1, 1},
		uint64(out.ptr), uint64(in.ptr), uint64(count), uint64(region.ptr), uint64(chunk), uint64(mode), sig, root, cdst, csrc, cn)
}

// FlagBroadcast enqueues one flag broadcast of count bytes: root pushes its
// in to every peer, whose kernels copy it into their out; root's out gets
// in too (nothing to do when they are the same). in is only read on root
// (pass out elsewhere). Chunks (bytes), grid and ordering as FlagGather;
// every rank must name the same root.
func (s *Stream) FlagBroadcast(out, in *Buffer, count, root int, region *Buffer, l FlagLayout, chunk, grid, ranks int) error {
	return s.flagBroadcast(FlagBroadcastKind, out, in, count, root, region, l, chunk, grid, ranks, SideCopy{})
}

// FlagSendRecv is FlagBroadcast between two ranks as a send (root: this
// rank; buf is read) or a receive (root: the peer; buf is written), under
// FlagSendRecvKind, so a rank that broadcasts meanwhile is caught. side
// is a copy to the rank itself made too (SideCopy).
func (s *Stream) FlagSendRecv(buf *Buffer, count, root int, region *Buffer, l FlagLayout, chunk, grid int, side SideCopy) error {
	return s.flagBroadcast(FlagSendRecvKind, buf, buf, count, root, region, l, chunk, grid, 2, side)
}

// FlagExchange enqueues one flag exchange between two ranks (a send and a
// receive of count bytes in one group): in goes to the peer, whose kernel
// copies it into its out. in and out may be the same buffer. Chunks
// (bytes), grid and ordering as FlagGather; side as FlagSendRecv.
func (s *Stream) FlagExchange(out, in *Buffer, count int, region *Buffer, l FlagLayout, chunk, grid int, side SideCopy) error {
	what := func() string { return fmt.Sprintf("flag exchange %d bytes", count) }
	if err := s.operands(what, count, count, out, in); err != nil {
		return err
	}
	if count == 0 {
		return side.alone(s, what)
	}
	if err := s.flagCheck(what, region, l, chunk, grid, 2); err != nil {
		return err
	}
	if err := side.check(s, what); err != nil {
		return err
	}
	return s.launchGather(out, in, count, region, chunk, grid, GatherModeExchange, FlagSignature(FlagExchangeKind, count, dtype.Uint8, dtype.Sum), FlagNoRoot, side)
}

func (s *Stream) flagBroadcast(kind FlagKind, out, in *Buffer, count, root int, region *Buffer, l FlagLayout, chunk, grid, ranks int, side SideCopy) error {
	what := func() string { return fmt.Sprintf("flag broadcast %d bytes root %d", count, root) }
	if root < 0 || root >= ranks {
		return fmt.Errorf("%s: %s: root not one of %d ranks", s.dev, what(), ranks)
	}
	if err := s.operands(what, count, count, out, in); err != nil {
		return err
	}
	if count == 0 {
		return side.alone(s, what)
	}
	if err := s.flagCheck(what, region, l, chunk, grid, ranks); err != nil {
		return err
	}
	if err := side.check(s, what); err != nil {
		return err
	}
	return s.launchGather(out, in, count, region, chunk, grid, GatherModeAll, FlagRootedSignature(kind, count, dtype.Uint8, dtype.Sum, root), uint64(root), side)
}

// DevicePtr is the device address of pinned memory from AllocHost, for
// kernels to read and write it directly (it is mapped: DEVICEMAP).
func (h *HostMem) DevicePtr() (uintptr, error) {
	var d cu.DevPtr
	err := h.dev.do(func(api cu.API) (e error) { d, e = api.MemHostGetDevicePointer(h.p); return })
	if err != nil {
		return 0, fmt.Errorf("%s: device address of pinned host memory: %w", h.dev, err)
	}
	return uintptr(d), nil
}

// Word returns the i-th 64-bit word of h for atomic access by the host (h
// must be at least 8(i+1) bytes; pinned allocations are page aligned).
func (h *HostMem) Word(i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&h.b[8*i]))
}
