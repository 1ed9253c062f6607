package capi

// HasGPU reports whether the process has a usable CUDA driver (device
// buffers, ncclMemAlloc on the GPU).
func (l *Library) HasGPU() bool {
	drv, err := l.driver()
	return err == nil && drv != nil
}

// MemAlloc is ncclMemAlloc: n bytes of device memory on the calling
// thread's current device. Without a GPU it fails with ncclInvalidUsage;
// cmd/libnccl then hands out host memory (the host-buffer extension).
func (l *Library) MemAlloc(n int) (uintptr, error) {
	if n <= 0 {
		return 0, fail(InvalidArgument, "ncclMemAlloc: size %d must be positive", n)
	}
	drv, err := l.driver()
	if err != nil || drv == nil {
		return 0, fail(InvalidUsage, "ncclMemAlloc: no CUDA driver in this process (%v)", err)
	}
	dv, err := drv.Device(l.opt.Memory.CurrentDevice())
	if err != nil {
		return 0, fail(UnhandledCudaError, "ncclMemAlloc: %w", err)
	}
	b, err := dv.Alloc(n)
	if err != nil {
		return 0, fail(UnhandledCudaError, "ncclMemAlloc: %w", err)
	}
	l.mu.Lock()
	l.allocs[b.Ptr()] = b
	l.mu.Unlock()
	return b.Ptr(), nil
}

// MemFree is ncclMemFree for memory from MemAlloc; ours is false for an
// address MemAlloc did not return (cmd/libnccl's host allocations).
func (l *Library) MemFree(p uintptr) (ours bool, err error) {
	l.mu.Lock()
	b := l.allocs[p]
	delete(l.allocs, p)
	l.mu.Unlock()
	if b == nil {
		return false, nil
	}
	if err := b.Free(); err != nil {
		return true, fail(UnhandledCudaError, "ncclMemFree: %w", err)
	}
	return true, nil
}

// Register is ncclCommRegister: flexlink maps buffers when a call first
// uses them, so registration only checks its arguments and returns a
// handle for Deregister.
func (l *Library) Register(h uintptr, p uintptr, n int) (uintptr, error) {
	if _, err := l.comm(h, "ncclCommRegister"); err != nil {
		return 0, err
	}
	if p == 0 || n <= 0 {
		return 0, fail(InvalidArgument, "ncclCommRegister: buffer %#x of %d bytes: want a non-null buffer and a positive size", p, n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	reg := l.next
	l.next++
	l.regs[reg] = true
	return reg, nil
}

// Deregister is ncclCommDeregister.
func (l *Library) Deregister(h, reg uintptr) error {
	if _, err := l.comm(h, "ncclCommDeregister"); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.regs[reg] {
		return fail(InvalidArgument, "ncclCommDeregister: handle %#x is not a live registration", reg)
	}
	delete(l.regs, reg)
	return nil
}
