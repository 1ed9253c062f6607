package direct

import (
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/collectives/flagplane"
	"github.com/flexlink/flexlink/fabric/shares"
	"github.com/flexlink/flexlink/internal/settings"
)

// Config is every setting of the direct GPU plane, read and checked once
// when the device communicator is made (ReadConfig), so that a plane can
// also be built in a test from a struct. Values that depend on the
// communicator (its size, the GPU's SM count) are resolved by the plane.
type Config struct {
	Path        string // FLEXLINK_GPU_PATH: auto, direct or staged
	ChunkBytes  int    // FLEXLINK_GPU_CHUNK_BYTES (≥ 64 KiB)
	CopyStreams int    // FLEXLINK_GPU_COPY_STREAMS (1..16)
	AllReduce   string // FLEXLINK_GPU_ALLREDUCE: auto, push or read
	AllGather   string // FLEXLINK_GPU_ALLGATHER: auto, push, store or pull
	AllToAll    string // FLEXLINK_GPU_ALLTOALL: auto, push, store or pull
	StagedChunk int    // FLEXLINK_GPU_STAGED_CHUNK_BYTES: the staged plane's pipeline chunk (0: off, -1: auto)
	Shared      string // FLEXLINK_GPU_SHARED: auto, leader or events (ranks that all share one GPU)

	Flag   FlagConfig
	Shares shares.Config // the staged link shares' (fabric/shares: PCIe, net)
}

// FlagConfig holds the flag kernels' settings (collectives/flagplane).
type FlagConfig = flagplane.Config

// ReadConfig reads and checks the GPU plane's settings from env. Every
// error names the variable, its value and what is allowed.
func ReadConfig(env settings.Env) (Config, error) {
	var c Config
	var err error
	words := func(name string, allowed ...string) (string, error) {
		v := env.String(name)
		for _, a := range allowed {
			if v == a {
				return v, nil
			}
		}
		return "", fmt.Errorf("%s=%q: want %s", name, v, strings.Join(allowed, ", "))
	}
	ints := []struct {
		name   string
		to     *int
		lo, hi int
		want   string
	}{
		{"FLEXLINK_GPU_CHUNK_BYTES", &c.ChunkBytes, 1 << 16, 1 << 40, "at least 65536"},
		{"FLEXLINK_GPU_COPY_STREAMS", &c.CopyStreams, 1, 16, "1 to 16"},
		{"FLEXLINK_GPU_FLAG_BYTES", &c.Flag.Bytes, -1, 1 << 62, "-1 (auto), 0 or a byte count"},
		{"FLEXLINK_GPU_FLAG_COLL_BYTES", &c.Flag.CollBytes, -1, 1 << 62, "-1 (auto), 0 or a byte count"},
		{"FLEXLINK_GPU_FLAG_ONESHOT_BYTES", &c.Flag.OneShotBytes, -1, 1 << 62, "-1 (auto), 0 or a byte count"},
		{"FLEXLINK_GPU_FLAG_BLOCKS", &c.Flag.Blocks, -1 << 62, 1 << 62, "a block count"},
		{"FLEXLINK_GPU_FLAG_REGION_BYTES", &c.Flag.RegionBytes, -1 << 62, 1 << 62, "a byte count"},
		{"FLEXLINK_GPU_FLAG_PCIE_BLOCKS", &c.Flag.PCIeBlocks, 0, 32, "0 (off) to 32"},
	}
	for _, i := range ints {
		v, err := env.Int(i.name)
		if err != nil {
			return c, err
		}
		if v < i.lo || v > i.hi {
			return c, fmt.Errorf("%s=%d: want %s", i.name, v, i.want)
		}
		*i.to = v
	}
	c.StagedChunk = -1
	if v := env.String("FLEXLINK_GPU_STAGED_CHUNK_BYTES"); v != "auto" {
		n, err := env.Int("FLEXLINK_GPU_STAGED_CHUNK_BYTES")
		if err != nil {
			return c, err
		}
		if n < 0 || n > 1<<40 {
			return c, fmt.Errorf("FLEXLINK_GPU_STAGED_CHUNK_BYTES=%d: want auto, 0 (no pipelining) or a byte count", n)
		}
		c.StagedChunk = n
	}
	if c.Path, err = words("FLEXLINK_GPU_PATH", "auto", "direct", "staged"); err != nil {
		return c, err
	}
	if c.Shared, err = words("FLEXLINK_GPU_SHARED", "auto", "leader", "events"); err != nil {
		return c, err
	}
	enq, err := words("FLEXLINK_GPU_ENQUEUE", "sync", "async")
	if err != nil {
		return c, err
	}
	c.Flag.Enqueue = enq == "async"
	c.Flag.Lines = env.Bool("FLEXLINK_GPU_FLAG_LINES")
	if c.Flag.GraphRecord, err = words("FLEXLINK_GPU_GRAPH_RECORD", "auto", "chain", "branch"); err != nil {
		return c, err
	}
	if c.AllReduce, err = words("FLEXLINK_GPU_ALLREDUCE", "auto", "push", "read"); err != nil {
		return c, err
	}
	if c.AllGather, err = words("FLEXLINK_GPU_ALLGATHER", "auto", "push", "store", "pull", ""); err != nil {
		return c, err
	}
	if c.AllToAll, err = words("FLEXLINK_GPU_ALLTOALL", "auto", "push", "store", "pull", ""); err != nil {
		return c, err
	}
	if c.Flag.KernelTimeout, err = env.Duration("FLEXLINK_GPU_KERNEL_TIMEOUT"); err != nil {
		return c, err
	}
	c.Shares, err = shares.ReadConfig(env)
	return c, err
}
