package shm

import (
	"math"
	"os"
	"runtime"
	"time"
	"unsafe"
)

// Whether single copy pays is a property of the host, so with
// FLEXLINK_SHM_CMA_BYTES=auto each endpoint measures it once, the first
// time a peer offers single-copy frames, instead of trusting a rule of
// thumb. process_vm_readv pins every 4 KiB page of the peer's buffer
// before copying it, and that cost varies widely: on the 2-core KVM guest
// this was developed on it read at a third of memmove's speed (so the one
// copy it saves costs more than the two it replaces), while on bare metal,
// or from huge pages, it comes close to memmove.

// autoCMABytes is the threshold FLEXLINK_SHM_CMA_BYTES=auto sends from
// once the receiver's measurement says single copy pays.
const autoCMABytes = 64 << 10

// calibrationBytes is the size of the measured read: large enough that the
// per-page cost dominates the system call, small enough to take well under
// a millisecond.
const calibrationBytes = 1 << 20

// measureFunc times one calibrationBytes read of this process's own memory
// by process_vm_readv and one memmove of it (the best of a few tries: a
// busy host only ever makes a try slower).
type measureFunc func(read readvFunc) (cma, cpy time.Duration, err error)

func measureCMA(read readvFunc) (cma, cpy time.Duration, err error) {
	src, dst := make([]byte, calibrationBytes), make([]byte, calibrationBytes)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault both in
	addr := uint64(uintptr(unsafe.Pointer(&src[0])))
	cma, cpy = math.MaxInt64, math.MaxInt64
	for range 5 {
		t := time.Now()
		copy(dst, src)
		cpy = min(cpy, time.Since(t))
		t = time.Now()
		if _, err := read(os.Getpid(), dst, addr); err != nil {
			return 0, 0, err
		}
		cma = min(cma, time.Since(t))
	}
	runtime.KeepAlive(src)
	return cma, cpy, nil
}

// cmaPays decides from a measurement whether pulling a message costs less
// than the ring copies it replaces (the sender's into the ring, the
// receiver's out of it). Where every rank has a core of its own those two
// copies run at the same time on two cores, so the pull must beat one of
// them; where ranks share cores they take turns, so it need only beat two.
func cmaPays(cma, cpy time.Duration, oversubscribed bool) bool {
	if oversubscribed {
		return cma < 2*cpy
	}
	return cma < cpy
}

// oversubscribed reports whether the host runs at least as many ranks as
// it has cores (localRanks from the launcher; 0 when unknown).
func oversubscribed(localRanks, cpus int) bool { return localRanks > 0 && localRanks >= cpus }
