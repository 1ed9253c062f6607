package capi

// Revoke is ncclCommRevoke(comm, flags): placeholder until the abort-scope
// work lands; it refuses, naming the function.
func (l *Library) Revoke(h uintptr, flags int) error {
	if _, err := l.handles.comm(h, "ncclCommRevoke"); err != nil {
		return err
	}
	return fail(InvalidUsage, "ncclCommRevoke is not supported by flexlink's libnccl yet")
}
