package bootstrap

import "fmt"

// Field bounds checked by the decoders.
const (
	nonceLen   = 32
	macLen     = 32
	maxNameLen = 255      // job id, host name
	maxKeyLen  = 4 << 10  // Put/Get key
	maxTextLen = 64 << 10 // error text
)

// collKind says which collective a tColl/tCollRes frame belongs to.
type collKind uint8

const (
	kAllGather collKind = iota + 1
	kBroadcast
	kBarrier
)

func (k collKind) String() string {
	switch k {
	case kAllGather:
		return "allgather"
	case kBroadcast:
		return "broadcast"
	case kBarrier:
		return "barrier"
	}
	return fmt.Sprintf("collective(%d)", uint8(k))
}

// message is one decoded payload; its type is msgType().
type message interface {
	msgType() msgType
	encode(e *enc)
}

type helloMsg struct {
	Rank, Size uint32
	Job, Host  string
	Nonce      [nonceLen]byte
}

type challengeMsg struct {
	Nonce [nonceLen]byte
	Proof [macLen]byte // server's proof over the client's nonce
}

type proofMsg struct{ Proof [macLen]byte }

type welcomeMsg struct{}

type rejectMsg struct {
	Class class
	Text  string
}

type heartbeatMsg struct{}

type byeMsg struct{}

type collMsg struct {
	Seq  uint64
	Kind collKind
	Root uint32
	Data []byte
}

// collResMsg is a collective's result (Status == 0) or its failure.
// Parts: every rank's data for AllGather, the root's for Broadcast, none
// for Barrier.
type collResMsg struct {
	Seq    uint64
	Kind   collKind
	Status class
	Text   string
	Parts  [][]byte
}

type putMsg struct {
	ID    uint64
	Key   string
	Value []byte
}

type getMsg struct {
	ID  uint64
	Key string
}

type replyMsg struct {
	ID     uint64
	Status class // 0: ok
	Text   string
	Value  []byte
}

// abortMsg fails the whole job. Rank is the aborting rank, rankLauncher,
// or rankDetected.
type abortMsg struct {
	Class class
	Rank  int32
	Text  string
}

func (helloMsg) msgType() msgType     { return tHello }
func (challengeMsg) msgType() msgType { return tChallenge }
func (proofMsg) msgType() msgType     { return tProof }
func (welcomeMsg) msgType() msgType   { return tWelcome }
func (rejectMsg) msgType() msgType    { return tReject }
func (heartbeatMsg) msgType() msgType { return tHeartbeat }
func (byeMsg) msgType() msgType       { return tBye }
func (collMsg) msgType() msgType      { return tColl }
func (collResMsg) msgType() msgType   { return tCollRes }
func (putMsg) msgType() msgType       { return tPut }
func (getMsg) msgType() msgType       { return tGet }
func (replyMsg) msgType() msgType     { return tReply }
func (abortMsg) msgType() msgType     { return tAbort }

func (m helloMsg) encode(e *enc) {
	e.u32(m.Rank)
	e.u32(m.Size)
	e.str(m.Job)
	e.str(m.Host)
	e.raw(m.Nonce[:])
}
func (m challengeMsg) encode(e *enc) { e.raw(m.Nonce[:]); e.raw(m.Proof[:]) }
func (m proofMsg) encode(e *enc)     { e.raw(m.Proof[:]) }
func (welcomeMsg) encode(*enc)       {}
func (m rejectMsg) encode(e *enc)    { e.u8(uint8(m.Class)); e.str(m.Text) }
func (heartbeatMsg) encode(*enc)     {}
func (byeMsg) encode(*enc)           {}
func (m collMsg) encode(e *enc) {
	e.u64(m.Seq)
	e.u8(uint8(m.Kind))
	e.u32(m.Root)
	e.bytes(m.Data)
}
func (m collResMsg) encode(e *enc) {
	e.u64(m.Seq)
	e.u8(uint8(m.Kind))
	e.u8(uint8(m.Status))
	e.str(m.Text)
	e.u32(uint32(len(m.Parts)))
	for _, p := range m.Parts {
		e.bytes(p)
	}
}
func (m putMsg) encode(e *enc)   { e.u64(m.ID); e.str(m.Key); e.bytes(m.Value) }
func (m getMsg) encode(e *enc)   { e.u64(m.ID); e.str(m.Key) }
func (m replyMsg) encode(e *enc) { e.u64(m.ID); e.u8(uint8(m.Status)); e.str(m.Text); e.bytes(m.Value) }
func (m abortMsg) encode(e *enc) { e.u8(uint8(m.Class)); e.i32(m.Rank); e.str(m.Text) }

// marshal encodes m as a complete frame.
func marshal(m message) []byte {
	e := enc{b: make([]byte, headerLen, 64)}
	m.encode(&e)
	b := e.b
	n := len(b) - headerLen
	b[0], b[1], b[2] = frameMagic, wireVersion, byte(m.msgType())
	b[3], b[4], b[5], b[6] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return b
}

// decodeMsg decodes a frame's payload. Byte slices in the result alias
// f.payload.
func decodeMsg(f frame) (message, error) {
	d := &dec{b: f.payload}
	var m message
	switch f.typ {
	case tHello:
		var h helloMsg
		h.Rank, h.Size = d.u32(), d.u32()
		h.Job = d.strMax(maxNameLen, "job id")
		h.Host = d.strMax(maxNameLen, "host")
		copy(h.Nonce[:], d.take(nonceLen, "nonce"))
		m = h
	case tChallenge:
		var c challengeMsg
		copy(c.Nonce[:], d.take(nonceLen, "nonce"))
		copy(c.Proof[:], d.take(macLen, "proof"))
		m = c
	case tProof:
		var p proofMsg
		copy(p.Proof[:], d.take(macLen, "proof"))
		m = p
	case tWelcome:
		m = welcomeMsg{}
	case tReject:
		r := rejectMsg{Class: class(d.u8())}
		r.Text = d.strMax(maxTextLen, "text")
		if d.err == nil && !r.Class.valid() {
			d.err = fmt.Errorf("reject class %d: %w", r.Class, errMalformed)
		}
		m = r
	case tHeartbeat:
		m = heartbeatMsg{}
	case tBye:
		m = byeMsg{}
	case tColl:
		c := collMsg{Seq: d.u64(), Kind: collKind(d.u8()), Root: d.u32()}
		c.Data = d.bytes()
		if d.err == nil && (c.Kind < kAllGather || c.Kind > kBarrier) {
			d.err = fmt.Errorf("collective kind %d: %w", c.Kind, errMalformed)
		}
		m = c
	case tCollRes:
		c := collResMsg{Seq: d.u64(), Kind: collKind(d.u8()), Status: class(d.u8())}
		c.Text = d.strMax(maxTextLen, "text")
		n := d.u32()
		// Each part takes at least 4 bytes, so n is bounded by what arrived.
		if d.err == nil && uint64(n) > uint64(len(d.b)/4) {
			d.fail("part list")
		}
		if d.err == nil && n > 0 {
			c.Parts = make([][]byte, n)
			for i := range c.Parts {
				c.Parts[i] = d.bytes()
			}
		}
		if d.err == nil && (c.Kind < kAllGather || c.Kind > kBarrier || (c.Status != 0 && !c.Status.valid())) {
			d.err = fmt.Errorf("collective result kind %d status %d: %w", c.Kind, c.Status, errMalformed)
		}
		m = c
	case tPut:
		p := putMsg{ID: d.u64()}
		p.Key = d.strMax(maxKeyLen, "key")
		p.Value = d.bytes()
		m = p
	case tGet:
		g := getMsg{ID: d.u64()}
		g.Key = d.strMax(maxKeyLen, "key")
		m = g
	case tReply:
		r := replyMsg{ID: d.u64(), Status: class(d.u8())}
		r.Text = d.strMax(maxTextLen, "text")
		r.Value = d.bytes()
		if d.err == nil && r.Status != 0 && !r.Status.valid() {
			d.err = fmt.Errorf("reply status %d: %w", r.Status, errMalformed)
		}
		m = r
	case tAbort:
		a := abortMsg{Class: class(d.u8()), Rank: d.i32()}
		a.Text = d.strMax(maxTextLen, "text")
		if d.err == nil && (!a.Class.valid() || a.Rank < rankDetected) {
			d.err = fmt.Errorf("abort class %d rank %d: %w", a.Class, a.Rank, errMalformed)
		}
		m = a
	default:
		return nil, fmt.Errorf("unknown message type %d: %w", uint8(f.typ), errMalformed)
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("%s: %w", f.typ, err)
	}
	return m, nil
}
