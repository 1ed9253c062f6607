package bootstrap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// sampleMsgs has one message of every type, with awkward field values.
func sampleMsgs() []message {
	var n [nonceLen]byte
	for i := range n {
		n[i] = byte(i * 7)
	}
	return []message{
		helloMsg{Rank: 3, Size: 16, Job: "job-1", Host: "node-a", Nonce: n},
		challengeMsg{Nonce: n, Proof: [macLen]byte{1, 2, 3}},
		proofMsg{Proof: [macLen]byte{31: 9}},
		welcomeMsg{},
		rejectMsg{Class: classAuth, Text: "no"},
		heartbeatMsg{},
		byeMsg{},
		collMsg{Seq: 1<<40 + 5, Kind: kBroadcast, Root: 2, Data: []byte("data")},
		collMsg{Seq: 0, Kind: kBarrier},
		collResMsg{Seq: 9, Kind: kAllGather, Parts: [][]byte{[]byte("a"), {}, []byte("ccc")}},
		collResMsg{Seq: 9, Kind: kAllGather, Status: classClosed, Text: "rank 2 closed"},
		putMsg{ID: 4, Key: "addr/3", Value: []byte{0, 1, 2}},
		getMsg{ID: 5, Key: ""},
		replyMsg{ID: 5, Status: classMismatch, Text: "differs"},
		replyMsg{ID: 6, Value: []byte("v")},
		abortMsg{Class: classTimeout, Rank: 7, Text: "too slow"},
		abortMsg{Class: classPeerLost, Rank: rankDetected, Text: "rank 1 on host x lost"},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, m := range sampleMsgs() {
		t.Run(m.msgType().String(), func(t *testing.T) {
			b := marshal(m)
			f, err := readFrame(bytes.NewReader(b), MaxFrameSize)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeMsg(f)
			if err != nil {
				t.Fatal(err)
			}
			if !equalMsg(got, m) {
				t.Fatalf("round trip: got %#v, want %#v", got, m)
			}
			// Independent check of the header layout.
			if b[0] != frameMagic || b[1] != wireVersion || msgType(b[2]) != m.msgType() ||
				int(binary.BigEndian.Uint32(b[3:7])) != len(b)-headerLen {
				t.Fatalf("bad header % x", b[:headerLen])
			}
		})
	}
}

// equalMsg compares messages treating nil and empty byte slices as equal.
func equalMsg(a, b message) bool {
	return bytes.Equal(marshal(a), marshal(b)) && reflect.TypeOf(a) == reflect.TypeOf(b)
}

func TestReadFrameMalformed(t *testing.T) {
	good := marshal(collMsg{Seq: 1, Kind: kAllGather, Data: []byte("hello")})
	hdr := func(magic, ver, typ byte, n uint32) []byte {
		h := []byte{magic, ver, typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(h[3:], n)
		return h
	}
	withPayload := func(t msgType, p []byte) []byte { return appendFrame(nil, t, p) }
	tests := []struct {
		name string
		in   []byte
		max  int
		want string // in the error
	}{
		{"empty", nil, MaxFrameSize, "EOF"},
		{"short header", good[:4], MaxFrameSize, "truncated header"},
		{"bad magic", append([]byte{'G'}, good[1:]...), MaxFrameSize, "bad magic"},
		{"bad version", hdr(frameMagic, 9, byte(tColl), 0), MaxFrameSize, "wire version"},
		{"type zero", hdr(frameMagic, wireVersion, 0, 0), MaxFrameSize, "unknown message type"},
		{"type too big", hdr(frameMagic, wireVersion, byte(tLast), 0), MaxFrameSize, "unknown message type"},
		{"oversize", hdr(frameMagic, wireVersion, byte(tColl), MaxFrameSize+1), MaxFrameSize, "exceeds limit"},
		{"over handshake limit", hdr(frameMagic, wireVersion, byte(tHello), maxHandshakeFrame+1), maxHandshakeFrame, "exceeds limit"},
		{"truncated payload", good[:len(good)-1], MaxFrameSize, "truncated payload"},
		{"short field", withPayload(tColl, []byte{0, 0, 0}), MaxFrameSize, "short"},
		{"trailing bytes", withPayload(tBye, []byte{1}), MaxFrameSize, "trailing"},
		{"bytes longer than payload", withPayload(tGet, append(make([]byte, 8), 0xff, 0xff, 0xff, 0xff)), MaxFrameSize, "short"},
		{"bad coll kind", marshal(collMsg{Kind: 9}), MaxFrameSize, "collective kind"},
		{"bad abort class", marshal(abortMsg{Class: 0}), MaxFrameSize, "abort class"},
		{"bad abort rank", marshal(abortMsg{Class: classAborted, Rank: -3}), MaxFrameSize, "abort class"},
		{"huge part count", withPayload(tCollRes, append(make([]byte, 8), byte(kAllGather), 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff)), MaxFrameSize, "part list"},
		{"long host", marshal(helloMsg{Host: strings.Repeat("h", maxNameLen+1)}), MaxFrameSize, "host of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := readFrame(bytes.NewReader(tc.in), tc.max)
			if err == nil {
				_, err = decodeMsg(f)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if tc.want != "EOF" && !errors.Is(err, errMalformed) {
				t.Fatalf("%v does not wrap errMalformed", err)
			}
		})
	}
}

// TestReadFrameAllocBounded: a frame that declares 60 MiB and delivers a
// few bytes must not make the reader allocate anywhere near 60 MiB.
func TestReadFrameAllocBounded(t *testing.T) {
	in := append(appendFrame(nil, tColl, nil)[:3], 0x03, 0xc0, 0, 0) // 60 MiB
	in = append(in, make([]byte, 100)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readFrame(bufio.NewReader(bytes.NewReader(in)), MaxFrameSize)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "truncated payload") {
		t.Fatalf("got %v, want truncated payload", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > readChunk+1<<20 {
		t.Fatalf("allocated %d bytes for 100 bytes of payload", got)
	}
}

// TestReadFrameLarge reads a payload larger than one read chunk.
func TestReadFrameLarge(t *testing.T) {
	p := make([]byte, 2*readChunk+17)
	for i := range p {
		p[i] = byte(i * 31)
	}
	f, err := readFrame(bytes.NewReader(appendFrame(nil, tPut, p)), MaxFrameSize)
	if err != nil || !bytes.Equal(f.payload, p) {
		t.Fatalf("large frame: err %v, equal %v", err, bytes.Equal(f.payload, p))
	}
}

// FuzzDecodeFrame feeds arbitrary bytes to the frame reader and message
// decoder: they must never panic, and whatever decodes must re-encode to
// exactly the bytes that were read (the encoding is canonical).
func FuzzDecodeFrame(f *testing.F) {
	for _, m := range sampleMsgs() {
		f.Add(marshal(m))
	}
	f.Add([]byte{frameMagic, wireVersion, byte(tColl), 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		fr, err := readFrame(r, MaxFrameSize)
		if err != nil {
			if err != io.EOF && !errors.Is(err, errMalformed) {
				t.Fatalf("readFrame error %v is neither EOF nor errMalformed", err)
			}
			return
		}
		read := in[:len(in)-r.Len()]
		m, err := decodeMsg(fr)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("decodeMsg error %v does not wrap errMalformed", err)
			}
			return
		}
		if m.msgType() != fr.typ {
			t.Fatalf("decoded %s from a %s frame", m.msgType(), fr.typ)
		}
		if again := marshal(m); !bytes.Equal(again, read) {
			t.Fatalf("re-encoding differs:\n in  % x\n out % x", read, again)
		}
	})
}

// appendFrame appends a frame of type t with the given payload to dst.
func appendFrame(dst []byte, t msgType, payload []byte) []byte {
	dst = append(dst, frameMagic, wireVersion, byte(t))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}
