//go:build !cgo || nonvml

package topo

// Detect reads the local host's NICs, PCIe positions and NUMA nodes from
// sysfs. This binary was built without cgo, which go-nvml needs to load
// libnvidia-ml, or with the nonvml tag (the NCCL C library, which must not
// carry go-nvml's unresolved symbols), so it sees no GPU; NoGPU says so.
func Detect(opt Options) (*Host, error) {
	h, _, err := detectBase(opt)
	if err != nil {
		return nil, err
	}
	h.NoGPU = "NVML not available: built without cgo (CGO_ENABLED=0) or with the nonvml tag; go-nvml needs cgo to load libnvidia-ml.so.1"
	return finish(h)
}
