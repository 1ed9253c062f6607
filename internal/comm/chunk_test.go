package comm

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/flexlink/flexlink/collectives"
)

// TestChunk: a communicator pipelines in DefaultChunkBytes, within a host
// or across, unless FLEXLINK_CHUNK_BYTES is set.
func TestChunk(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hosts int
		set   string
		want  int
	}{
		{"one host", 1, "", collectives.DefaultChunkBytes},
		{"two hosts", 2, "", collectives.DefaultChunkBytes},
		{"two hosts, set", 2, "65536", 65536},
		{"one host, set", 1, "2097152", 2 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "lo"}
			if tc.set != "" {
				vars["FLEXLINK_CHUNK_BYTES"] = tc.set
			}
			host := func(r int) string { return "host" + strconv.Itoa(r%tc.hosts) }
			runLoggedHosts(t, 2, vars, host, func(c *Comm) error {
				if got := c.engine.Config().ChunkBytes; got != tc.want {
					return fmt.Errorf("rank %d: chunk %d bytes, want %d", c.rank, got, tc.want)
				}
				return nil
			})
		})
	}
}
