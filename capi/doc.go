// Package capi is the Go side of flexlink's NCCL-compatible C library
// (cmd/libnccl builds it into libnccl.so.2): argument checking, the
// ncclDataType_t / ncclRedOp_t / ncclResult_t codes, the 128-byte
// ncclUniqueId, ncclConfig_t parsing, communicator handles, group
// semantics, last-error text and non-blocking initialisation. It has no
// cgo: cmd/libnccl converts C values into the plain Go values this package
// takes, so everything here is testable with `go test`.
//
// The work is done by package rank: every communicator is a rank.Comm (over
// a bootstrap store the unique id names), and device buffers go through its
// DeviceComm on the caller's stream.
//
// # Buffers
//
// A buffer pointer is device memory when the Memory given to New says so
// (cuPointerGetAttributes in cmd/libnccl); otherwise it is host memory.
// Host buffers are an extension for machines without a GPU (CI): a call on
// host buffers runs synchronously (after synchronising the caller's stream
// when a driver is loaded) and returns when the data is in place. A call
// that mixes host and device buffers fails with ncclInvalidArgument.
//
// # Threads
//
// NCCL keeps the group depth per thread. Go has no thread-locals, so every
// entry point takes the caller's OS thread id (cmd/libnccl passes gettid();
// a cgo callback runs on the C caller's thread), and the group state lives
// in a map keyed by it. nccl-tests -g N (one thread, several communicators
// in one group) and one thread per rank (-t N) both work.
package capi
