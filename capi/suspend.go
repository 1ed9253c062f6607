package capi

// Suspend is ncclCommSuspend(comm, flags): placeholder until the memory
// work lands; it refuses, naming the function.
func (l *Library) Suspend(h uintptr, flags int) error {
	if _, err := l.handles.comm(h, "ncclCommSuspend"); err != nil {
		return err
	}
	return fail(InvalidUsage, "ncclCommSuspend is not supported by flexlink's libnccl yet")
}

// Resume is ncclCommResume(comm): placeholder, as Suspend.
func (l *Library) Resume(h uintptr) error {
	if _, err := l.handles.comm(h, "ncclCommResume"); err != nil {
		return err
	}
	return fail(InvalidUsage, "ncclCommResume is not supported by flexlink's libnccl yet")
}
