// Package pcie is the machinery of the PCIe link between two GPUs of one
// host, with no collective logic: staging through pinned host memory.
// The sender copies a part of a transfer device-to-host into a pinned
// buffer it shares with the receiver, and the receiver copies it
// host-to-device into its own memory, so the bytes cross the PCIe bus
// while the NVLink copy engines carry the rest. What goes over it, when,
// and how it is ordered against the NVLink part is the business of the
// share that uses it (fabric/pcieshare, and fabric/netshare for its own
// staging), as for fabric/nvlink.
//
// # Staging (staging.go)
//
// Every ordered pair (sender i, receiver j) has its own staging buffer: an
// anonymous memfd that i creates, maps and registers as pinned memory
// (Tx), and that j opens through /proc/<pid of i>/fd/<fd>, maps and
// registers too (Rx, gpu.SharedHost). i describes the buffer and its
// Slots IPC events in RefBytes bytes (Tx.PutRef) for the peers; j opens
// them (OpenRx). The memfd has no name in any file system and the kernel
// frees it with the last mapping, so nothing can leak.
//
// # Slots and the staging table (plan.go)
//
// A call's PCIe part is cut into up to Slots slots of whole pages; the
// sender records slot k's event after its last copy into the slot, and the
// receiver's copy stream waits on it before copying the slot out, so slot
// k+1's D2H overlaps slot k's H2D. The sender tells the receiver where each
// staged piece goes in a staging table (AppendTable, ParseTable).
package pcie

import "github.com/flexlink/flexlink/gpu"

const (
	// Slots is the number of slot events per ordered pair: the stages of
	// the D2H/H2D pipeline.
	Slots = 16
	// MaxSegs is the most entries of a staging table.
	MaxSegs = 128
	// Align is the granule of PCIe parts and slots: whole pages.
	Align = 4096
	// MinSlot is the smallest slot in bytes: smaller copies lose PCIe
	// bandwidth to per-copy cost.
	MinSlot = 2 << 20
	// MaxShare bounds a PCIe part to half a push, whatever was measured.
	MaxShare = 0.5
	// refHeader is a reference's fixed part: pid, fd, length, inode.
	refHeader = 4 * 8
	// RefBytes is the encoded size of one staging buffer's reference: the
	// buffer and its slot events' IPC handles.
	RefBytes = refHeader + Slots*gpu.IPCHandleSize
	// TableHeader is a staging table's fixed part: call, slot bytes,
	// entries.
	TableHeader = 3 * 8
	// TableBytes is a staging table's encoded size (padded to MaxSegs
	// entries, so that the receiver can post its receive with the exact
	// length before it knows how many there are).
	TableBytes = TableHeader + MaxSegs*16
)

// RoundStaging rounds a staging size up to whole pages.
func RoundStaging(n int) int { return (n + Align - 1) / Align * Align }
