package gpu

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Host memory that two processes of one host share and both register as
// pinned, so one GPU can copy into it (D2H) and another GPU, driven by the
// other process, can copy out of it (H2D) at full PCIe speed: the staging
// buffer of a host-staged PCIe link. DESIGN.md measured such a mapping at
// 54.5 GB/s D2H and 55.4 GB/s H2D on 2×H200.
//
// The memory is an anonymous memfd: it has no name in any file system
// (/dev/shm holds nothing), so nothing can leak past the processes. The
// kernel frees it when the last mapping and the last descriptor are gone,
// which a crash or kill -9 of both processes also achieves. The creator
// keeps its descriptor only until its peers have opened the memory (CloseFD);
// a peer opens it through /proc/<pid>/fd/<fd>, which the kernel allows to
// processes of the same user (a ptrace "read" check: no CAP_SYS_PTRACE, no
// socket to pass descriptors over), maps it and closes its descriptor at
// once. The inode number in the reference makes a stale or reused
// descriptor number fail instead of mapping some other file.

// SharedHostRef is what a peer needs to open a SharedHost: the creator's
// process id and descriptor, the length, and the memfd's inode (checked).
type SharedHostRef struct {
	PID, FD, Len int
	Ino          uint64
}

// SharedHost is a shared mapping registered as pinned memory with one
// device's driver (portable: every device of the process may copy it).
type SharedHost struct {
	dev *Device
	mem []byte
	reg *HostMem
	fd  int // creator's descriptor until CloseFD; -1 otherwise
	ref SharedHostRef
}

// newSharedHost is Device.NewSharedHost.
func newSharedHost(dv *Device, n int) (h *SharedHost, err error) {
	if n <= 0 {
		return nil, fmt.Errorf("%s: shared host memory of %d bytes: size must be positive", dv, n)
	}
	page := os.Getpagesize()
	n = (n + page - 1) / page * page
	fd, err := unix.MemfdCreate("flexlink-pcie-staging", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%s: shared host memory: memfd_create: %w", dv, err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return nil, fmt.Errorf("%s: shared host memory: fchmod: %w", dv, err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, fmt.Errorf("%s: shared host memory: size memfd to %s: %w", dv, byteSize(n), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: shared host memory: stat memfd: %w", dv, err)
	}
	h, err = mapShared(dv, fd, n)
	if err != nil {
		return nil, err
	}
	h.fd = fd
	h.ref = SharedHostRef{PID: os.Getpid(), FD: fd, Len: n, Ino: st.Ino}
	return h, nil
}

// openSharedHost is Device.OpenSharedHost.
func openSharedHost(dv *Device, ref SharedHostRef) (*SharedHost, error) {
	if ref.Len <= 0 || ref.PID <= 0 || ref.FD < 0 {
		return nil, fmt.Errorf("%s: open shared host memory: bad reference %+v", dv, ref)
	}
	path := fmt.Sprintf("/proc/%d/fd/%d", ref.PID, ref.FD)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: open shared host memory %s: %w", dv, path, err)
	}
	defer unix.Close(fd) // the mapping keeps the memory
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: open shared host memory %s: stat: %w", dv, path, err)
	}
	if st.Ino != ref.Ino || st.Size != int64(ref.Len) {
		return nil, fmt.Errorf("%s: open shared host memory %s: inode %d of %d bytes, want inode %d of %d bytes",
			dv, path, st.Ino, st.Size, ref.Ino, ref.Len)
	}
	h, err := mapShared(dv, fd, ref.Len)
	if err != nil {
		return nil, err
	}
	h.ref = ref
	return h, nil
}

// mapShared maps n bytes of fd shared and registers them.
func mapShared(dv *Device, fd, n int) (*SharedHost, error) {
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: map %s of shared host memory: %w", dv, byteSize(n), err)
	}
	reg, err := dv.RegisterHost(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return &SharedHost{dev: dv, mem: mem, reg: reg, fd: -1}, nil
}

// Bytes is the mapping, pinned; valid until Close.
func (h *SharedHost) Bytes() []byte { return h.mem }

// DevicePtr is the device address of the mapping, for kernels that load
// and store it over PCIe (it is registered with DEVICEMAP).
func (h *SharedHost) DevicePtr() (uintptr, error) { return h.reg.DevicePtr() }

// Len is the length in bytes (whole pages).
func (h *SharedHost) Len() int { return len(h.mem) }

// Ref is what a peer passes to OpenSharedHost (the creator's reference,
// also on the side that opened it).
func (h *SharedHost) Ref() SharedHostRef { return h.ref }

// CloseFD closes the creator's descriptor once every peer has opened the
// memory; the mappings keep it alive. Idempotent.
func (h *SharedHost) CloseFD() error {
	if h.fd < 0 {
		return nil
	}
	err := unix.Close(h.fd)
	h.fd = -1
	if err != nil {
		return fmt.Errorf("%s: close shared host memory descriptor: %w", h.dev, err)
	}
	return nil
}

// Close unregisters and unmaps the memory (and closes the descriptor if
// still open). Copies that use it must have completed. A second Close
// returns an error wrapping errs.ErrClosed (from the registration).
func (h *SharedHost) Close() error {
	err := h.reg.Free()
	if h.mem != nil && err == nil {
		if merr := unix.Munmap(h.mem); merr != nil {
			err = fmt.Errorf("%s: unmap shared host memory: %w", h.dev, merr)
		}
		h.mem = nil
	}
	if ferr := h.CloseFD(); err == nil {
		err = ferr
	}
	return err
}
