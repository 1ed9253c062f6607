// Package nvlink is the machinery of the NVLink link between the GPUs of
// one host, with no collective logic: the windows through which a rank
// reads and writes its peers' device memory (CUDA IPC mappings, window.go)
// and the copy streams that drive the copy engines toward one peer
// (lanes.go). What moves over them, when, and in which order is the
// business of the data plane that uses it (collectives/direct).
package nvlink
