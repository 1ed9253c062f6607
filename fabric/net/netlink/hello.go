package netlink

import (
	"fmt"

	"github.com/flexlink/flexlink/fabric/net/hello"
)

// A connection's first message is its hello (fabric/net/hello, the
// connection layer: the sender's and receiver's ranks, the sender's host
// name as its extra bytes, and a proof of the job secret bound to the job,
// the communicator and the listener's handle, random per listener: a hello
// is good for one endpoint only), then the layer's confirmation. A
// listener drops a connection whose hello is short, garbled, meant for
// another rank or endpoint, or does not prove the secret, with one
// rate-limited WARN.
const (
	helloTag = 3 // every tag fits the 20 bits the ucx provider leaves
	// maxTag is the largest tag a netlink connection carries (the layer
	// checks the provider's width: net.CheckTags).
	maxTag = helloTag
)

// helloConfig is what the hellos of cfg's links prove.
func helloConfig(cfg Config) hello.Config {
	return hello.Config{Secret: cfg.Secret, JobID: cfg.JobID, Purpose: "flexlink netlink hello", Scope: cfg.Comm, Tag: helloTag}
}

// checkPeer refuses a proved hello that is not for this rank, or not from
// another rank.
func checkPeer(h hello.Hello, cfg Config) error {
	if h.To != cfg.Rank || h.From < 0 || h.From == cfg.Rank {
		return fmt.Errorf("hello from rank %d to rank %d reached rank %d", h.From, h.To, cfg.Rank)
	}
	return nil
}
