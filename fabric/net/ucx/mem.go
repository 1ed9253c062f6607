package ucx

import (
	"fmt"
	"syscall"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/ucx/internal/ucp"
	"github.com/flexlink/flexlink/internal/errs"
)

// memRegion is a buffer registered with UCX (ucp_mem_map): sends and
// receives inside it pass the memory handle, so UCX skips its own
// registration.
type memRegion struct {
	p    *Provider
	buf  []byte
	memh ucp.Memh
}

// RegMr registers host memory with UCX. kind must be fnet.MemHost. The
// region keeps buf referenced until Deregister.
func (p *Provider) RegMr(buf []byte, kind fnet.MemKind) (fnet.MemRegion, error) {
	if kind != fnet.MemHost {
		return nil, fmt.Errorf("net ucx: register memory of kind %d: only host memory: %w", kind, errs.ErrNotSupported)
	}
	if len(buf) == 0 {
		return &memRegion{p: p}, nil
	}
	mr := &memRegion{p: p, buf: buf}
	err := p.e.call(func() error {
		m, err := p.lib.MemMap(p.e.ctx, addr(buf), len(buf))
		mr.memh = m
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("net ucx: register %d bytes: %w", len(buf), err)
	}
	return mr, nil
}

// Deregister releases the registration (no request may still use it).
func (m *memRegion) Deregister() error {
	if m.memh == 0 {
		return nil
	}
	h := m.memh
	m.memh = 0
	err := m.p.e.call(func() error { return m.p.lib.MemUnmap(m.p.e.ctx, h) })
	if isClosed(err) {
		return nil // the context is gone, and the registration with it
	}
	return err
}

// memhFor returns the UCX handle of mr when it is one of ours and covers
// buf, else 0 (UCX then registers internally as needed).
func memhFor(mr fnet.MemRegion, buf []byte) ucp.Memh {
	m, ok := mr.(*memRegion)
	if !ok || m == nil || m.memh == 0 || len(buf) == 0 {
		return 0
	}
	lo, hi := addr(m.buf), addr(m.buf)+uintptr(len(m.buf))
	if a := addr(buf); a < lo || a+uintptr(len(buf)) > hi {
		return 0
	}
	return m.memh
}

// AllocHost maps n bytes of anonymous memory outside the Go heap: the
// memory to hand UCX for long-lived buffers (register it with RegMr). Free
// it with FreeHost once no request uses it.
func AllocHost(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("net ucx: alloc %d bytes", n)
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("net ucx: mmap %d bytes: %w", n, err)
	}
	return b, nil
}

// FreeHost unmaps memory from AllocHost.
func FreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return syscall.Munmap(b[:cap(b)])
}
