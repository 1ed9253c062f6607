package netlink

import (
	"fmt"

	"github.com/flexlink/flexlink/fabric/net/hello"
)

// A connection's first message is its hello (fabric/net/hello: the
// sender's and receiver's ranks, the sender's host name as its extra
// bytes, and a proof of the job secret bound to the job, the communicator
// and the listener's handle, random per listener: a hello is good for one
// endpoint only); the second an empty confirmation that the listener
// receives only once it has accepted the hello (so the dialer learns of a
// refusal). A listener drops a connection whose hello is short, garbled,
// meant for another rank or endpoint, or does not prove the secret, with
// one rate-limited WARN.
const (
	helloTag   = 3 // every tag fits the 20 bits the ucx provider leaves
	confirmTag = 4 // the empty message after the hello
	// maxTag is the largest tag a netlink connection carries (Open
	// checks the provider's width: net.CheckTags).
	maxTag = confirmTag
)

// helloConfig is what the hellos of cfg's links prove.
func helloConfig(cfg Config) hello.Config {
	return hello.Config{Secret: cfg.Secret, JobID: cfg.JobID, Purpose: "flexlink netlink hello", Scope: cfg.Comm, Tag: helloTag}
}

type helloMsg struct {
	from, to int
	host     string
}

// marshal returns the hello for the listener whose handle is handle.
func (h helloMsg) marshal(cfg Config, handle []byte) []byte {
	return helloConfig(cfg).Marshal(hello.Hello{From: h.from, To: h.to, Extra: []byte(h.host)}, handle)
}

// checkHello parses b, a hello that reached the endpoint of cfg whose
// handle is handle.
func checkHello(b []byte, cfg Config, handle []byte) (helloMsg, error) {
	p, err := helloConfig(cfg).Parse(b, handle)
	h := helloMsg{from: p.From, to: p.To, host: string(p.Extra)}
	if err != nil {
		return h, fmt.Errorf("communicator %q: %w", cfg.Comm, err)
	}
	if h.to != cfg.Rank || h.from < 0 || h.from == cfg.Rank {
		return h, fmt.Errorf("hello from rank %d to rank %d reached rank %d", h.from, h.to, cfg.Rank)
	}
	return h, nil
}
