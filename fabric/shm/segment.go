package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A segment is the memory two ranks share: one anonymous memfd (it never
// has a name in /dev/shm, so a crash leaks nothing; the kernel frees it when
// the last mapping goes), created by the dialing rank, passed to the
// listening rank over the authenticated unix socket, and mapped by both.
//
// Layout: one 4 KiB control page, then the ring of direction 0 (dialer to
// listener), then the ring of direction 1. The control page holds, per
// direction, the producer's head and the consumer's tail (bytes ever
// written / consumed, on cache lines of their own), the two futex words
// that a sleeping consumer (data) or producer (space) waits on, the count
// of single-copy (CMA) messages the consumer has pulled and the futex word
// a producer waiting for that count sleeps on, and one "closed" word per
// side.
const (
	ctlBytes     = 4096
	segMagic     = 0x01534d5358414c46 // "FLXSMS\x01" little-endian
	dirBase      = 512
	dirStride    = 1024
	offHead      = 0
	offTail      = 128
	offDataWait  = 256
	offSpaceWait = 384
	offAcked     = 512
	offAckWait   = 640
	offClosed    = 2560 // + side*128

	minRingBytes = 64 << 10
	maxRingBytes = 1 << 30
)

type segment struct {
	mem       []byte
	ringBytes uint64
}

// checkRingBytes validates a ring size from the settings or from a peer.
func checkRingBytes(n uint64) error {
	if n < minRingBytes || n > maxRingBytes || n%64 != 0 {
		return fmt.Errorf("shm ring of %d bytes: want a multiple of 64 in [%d, %d]", n, minRingBytes, maxRingBytes)
	}
	return nil
}

// createSegment makes a zeroed memfd for two rings of ringBytes and maps it.
// The caller owns fd (to pass it on, then close it).
func createSegment(name string, ringBytes uint64) (fd int, seg *segment, err error) {
	if err := checkRingBytes(ringBytes); err != nil {
		return -1, nil, err
	}
	fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("fchmod memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(ctlBytes+2*ringBytes)); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("size memfd to %d bytes: %w", ctlBytes+2*ringBytes, err)
	}
	seg, err = mapSegment(fd, ringBytes)
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&seg.mem[0])), segMagic)
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&seg.mem[8])), ringBytes)
	return fd, seg, nil
}

// mapSegment maps a segment made by createSegment (in this process or in
// the peer), after checking that its size matches ringBytes.
func mapSegment(fd int, ringBytes uint64) (*segment, error) {
	if err := checkRingBytes(ringBytes); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat shared segment: %w", err)
	}
	size := ctlBytes + 2*ringBytes
	if uint64(st.Size) != size {
		return nil, fmt.Errorf("shared segment has %d bytes, want %d", st.Size, size)
	}
	// No MAP_POPULATE: faulting in 8 MiB of rings at connect time cost
	// ~6 ms per link, which is most of a short job's start-up; pages are
	// faulted in by the first messages that reach them instead.
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map shared segment of %d bytes: %w", size, err)
	}
	return &segment{mem: mem, ringBytes: ringBytes}, nil
}

// valid reports whether the control page carries the creator's stamp.
func (s *segment) valid() bool {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&s.mem[0]))) == segMagic &&
		atomic.LoadUint64((*uint64)(unsafe.Pointer(&s.mem[8]))) == s.ringBytes
}

func (s *segment) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&s.mem[off])) }

// ring returns the shared state of direction d (0: dialer to listener).
func (s *segment) ring(d int) *ring {
	base := dirBase + d*dirStride
	start := ctlBytes + uint64(d)*s.ringBytes
	return &ring{
		buf:       s.mem[start : start+s.ringBytes : start+s.ringBytes],
		size:      s.ringBytes,
		head:      s.u64(base + offHead),
		tail:      s.u64(base + offTail),
		dataWait:  s.u32(base + offDataWait),
		spaceWait: s.u32(base + offSpaceWait),
		acked:     s.u64(base + offAcked),
		ackWait:   s.u32(base + offAckWait),
	}
}

// closed returns the word that side (0 dialer, 1 listener) sets when it
// closes or aborts its end of the link.
func (s *segment) closed(side int) *atomic.Uint32 { return s.u32(offClosed + side*128) }

// unmap releases the mapping; the segment must not be used afterwards.
func (s *segment) unmap() error {
	if s.mem == nil {
		return nil
	}
	err := unix.Munmap(s.mem)
	s.mem = nil
	return err
}
