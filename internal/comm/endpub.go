package comm

import "encoding/json"

// EncodeEnd is the put (key and value) that publishes e as the end of
// communicator e.Comm seen by world rank by, in the form members of this
// package's communicators publish theirs (DecodeEnd reads it): for
// communicators that are not this package's but whose ends a launcher
// must hear of too (flexlink's libnccl reports its own to flexrun, see
// join.DialReporter). Their names must not be this package's ("w",
// "w.1", ...). e.ClosedBy is -1 unless a member closed the communicator
// while others were in a later collective.
func EncodeEnd(by int, e EndReport) (key string, value []byte) {
	rec := endRecord{Kind: e.Kind, Text: e.Text, InCall: e.InCall, Members: e.Members, By: by, Behind: e.Behind, Echo: e.Echo}
	if e.ClosedBy >= 0 {
		rec.Closed = &closeRecord{Rank: -1, World: e.ClosedBy, Calls: e.ClosedCalls}
	}
	b, _ := json.Marshal(rec)
	return endKey(e.Comm), b
}
