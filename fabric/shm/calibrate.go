package shm

import (
	"math"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
)

// Whether single copy pays is a property of the host, so with
// FLEXLINK_SHM_CMA_BYTES=auto each endpoint measures it once, the first
// time a peer offers single-copy frames, instead of trusting a rule of
// thumb. process_vm_readv pins every 4 KiB page of the peer's buffer
// before copying it, and that cost varies widely: on the 2-core KVM guest
// this was developed on it read at a third of memmove's speed (so the one
// copy it saves costs more than the two it replaces), while on bare metal,
// or from huge pages, it comes close to memmove.

// cmaPolicy is an endpoint's single-copy policy, shared by its links: the
// threshold from FLEXLINK_SHM_CMA_BYTES, how to read a peer's memory and,
// with auto, the one measurement that decides whether pulling pays.
type cmaPolicy struct {
	bytes   int       // smallest single-copy message; 0: off
	readv   readvFunc // process_vm_readv, or a test's stand-in
	oversub bool      // at least as many ranks on the host as cores
	// With FLEXLINK_SHM_CMA_BYTES=auto, measure (nil otherwise) decides
	// once whether this rank pulls single-copy messages.
	measure measureFunc
	once    sync.Once
	pull    bool
}

// canPull probes, once per link, whether this rank may read the memory of
// process pid (rank peer) with process_vm_readv: addr is the peer's probe
// word, want the nonce it must hold. When not (single copy off on either
// side, the kernel forbids it, or with auto it does not pay on this host),
// messages from the peer stay on the copy path, which is logged at DEBUG
// only: it is a slower path, not a fault.
func (p *cmaPolicy) canPull(log hclog.Logger, peer, pid int, addr uint64, want []byte) bool {
	if p.bytes == 0 || addr == 0 {
		return false
	}
	if err := probePeer(p.readv, pid, addr, want); err != nil {
		log.Debug("single-copy (CMA) reads not permitted; large messages from this peer are copied through the ring",
			"peer", peer, "pid", pid, "error", err)
		return false
	}
	return p.pullPays(log)
}

// pullPays reports whether pulling is worth it on this host: always with a
// threshold set by hand, after one measurement with auto.
func (p *cmaPolicy) pullPays(log hclog.Logger) bool {
	if p.measure == nil {
		return true
	}
	p.once.Do(func() {
		cma, cpy, err := p.measure(p.readv)
		p.pull = err == nil && cmaPays(cma, cpy, p.oversub)
		log.Debug("single-copy (CMA) calibrated", "pull_ns", cma.Nanoseconds(), "memmove_ns", cpy.Nanoseconds(),
			"bytes", calibrationBytes, "oversubscribed", p.oversub, "pull", p.pull, "error", err)
	})
	return p.pull
}

// config is a link's single-copy setting: peerPulls says the peer's
// probe of us worked (so we may send it single-copy frames), wePull that
// ours of it did.
func (p *cmaPolicy) config(peerPulls, wePull bool) cmaConfig {
	var c cmaConfig
	if peerPulls && p.bytes > 0 {
		c.sendMin = p.bytes
	}
	if wePull {
		c.recv, c.read = true, p.readv
	}
	return c
}

// autoCMABytes is the threshold FLEXLINK_SHM_CMA_BYTES=auto sends from
// once the receiver's measurement says single copy pays.
const autoCMABytes = 64 << 10

// calibrationBytes is the size of the measured read: large enough that the
// per-page cost dominates the system call and that memmove runs at memory
// speed, as it does on the large messages single copy is for (at 1 MiB a
// cache-hot memmove made pulls look twice as slow on a 2-core VM, so the
// decision flipped from run to run; 4 MiB gave a steady 1.45, docs/PERF.md
// "Host memory, eighteenth session"), small enough that the five tries
// take about 4 ms.
const calibrationBytes = 4 << 20

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
