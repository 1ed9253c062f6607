package comm

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"unsafe"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
)

// NoColor: see rank.NoColor.
const NoColor = -1

// Split: see rank.Comm.Split.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	c.opMu.Lock()
	seq := c.splitSeq
	c.splitSeq++
	c.opMu.Unlock()

	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*c.size)
	err := c.Run(ctx, "allgather", func(ctx context.Context) error {
		return c.engine.AllGather(ctx, int64Bytes(mine), int64Bytes(all), 2, dtype.Int64)
	})
	if err != nil {
		return nil, fmt.Errorf("split: %w", err)
	}
	if color < 0 {
		return nil, nil
	}
	type member struct{ key, parent int }
	var ms []member
	for r := 0; r < c.size; r++ {
		if all[2*r] == int64(color) {
			ms = append(ms, member{int(all[2*r+1]), r})
		}
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].key != ms[j].key {
			return ms[i].key < ms[j].key
		}
		return ms[i].parent < ms[j].parent
	})
	members := make([]int, len(ms))
	for i, m := range ms {
		members[i] = c.members[m.parent]
	}
	return withPXNGroup(ctx)(c.sub(ctx, c.name+".s"+strconv.Itoa(seq)+"c"+strconv.Itoa(color), members))
}

// Shrink: see rank.Comm.Shrink. Every caller derives the same member list,
// so it sends nothing to the excluded ranks nor over c's links.
func (c *Comm) Shrink(ctx context.Context, exclude []int) (*Comm, error) {
	out := map[int]bool{}
	for _, r := range exclude {
		if r < 0 || r >= c.size {
			return nil, fmt.Errorf("shrink: rank %d to exclude is out of range [0,%d)", r, c.size)
		}
		out[r] = true
	}
	if out[c.rank] {
		return nil, fmt.Errorf("shrink: rank %d excludes itself (excluded ranks do not call shrink)", c.rank)
	}
	var members []int
	for r := 0; r < c.size; r++ {
		if !out[r] {
			members = append(members, c.members[r])
		}
	}
	c.opMu.Lock()
	seq := c.shrinkSeq
	c.shrinkSeq++
	c.opMu.Unlock()
	// The member list is in the name: excluded ranks keep their own count
	// of shrinks, so two different shrinks may share a number, never a name.
	h := fnv.New64a()
	for _, m := range members {
		h.Write([]byte(strconv.Itoa(m) + ","))
	}
	return withPXNGroup(ctx)(c.sub(ctx, fmt.Sprintf("%s.k%d.%x", c.name, seq, h.Sum64()), members))
}

// withPXNGroup starts the PXN group service of a new communicator
// (pxngroup.go) once it is made.
func withPXNGroup(ctx context.Context) func(*Comm, error) (*Comm, error) {
	return func(c *Comm, err error) (*Comm, error) {
		if err != nil {
			return nil, err
		}
		if err := startPXNGroup(ctx, c); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// sub opens the endpoints of the communicator name of the world ranks
// members (this rank among them), publishes their addresses through the
// store, and makes the communicator; links open on first use.
func (c *Comm) sub(ctx context.Context, name string, members []int) (*Comm, error) {
	w := c.world
	eps, err := w.newEndpoints(name, w.needsNet(members))
	if err != nil {
		return nil, err
	}
	blob, _ := json.Marshal(eps.addresses())
	me := w.store.Rank()
	if err := w.store.Put(ctx, addrKey(name, me), blob); err != nil {
		eps.close()
		return nil, fmt.Errorf("split: publish addresses: %w", err)
	}
	addrOf := func(ctx context.Context, wpeer int) (map[string][]byte, error) {
		b, err := w.store.Get(ctx, addrKey(name, wpeer))
		if err != nil {
			return nil, err
		}
		var m map[string][]byte
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("addresses of rank %d: %w", wpeer, err)
		}
		return m, nil
	}
	return newComm(w, name, members, me, eps, addrOf)
}

func addrKey(comm string, worldRank int) string {
	return "addr/" + comm + "/" + strconv.Itoa(worldRank)
}

// int64Bytes views s as host bytes (shares memory).
func int64Bytes(s []int64) collectives.HostBuffer {
	if len(s) == 0 {
		return nil
	}
	return collectives.HostBuffer(unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 8*len(s)))
}
