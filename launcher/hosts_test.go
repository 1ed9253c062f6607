package launcher

import (
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

func TestParseHostList(t *testing.T) {
	tests := []struct {
		name    string
		specs   []string
		want    []Host
		wantErr string
	}{
		{"one host, one slot", []string{"a"}, []Host{{Name: "a", Slots: 1}}, ""},
		{"slots", []string{"a:4,b:2"}, []Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 2}}, ""},
		{"repeated flag", []string{"a:2", "b"}, []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}, ""},
		{"duplicates add", []string{"a,a:3", "a"}, []Host{{Name: "a", Slots: 5}}, ""},
		{"order kept", []string{"b,a,b"}, []Host{{Name: "b", Slots: 2}, {Name: "a", Slots: 1}}, ""},
		{"bracketed ipv6", []string{"[::1]:2"}, []Host{{Name: "::1", Slots: 2}}, ""},
		{"spaces trimmed", []string{" a:2 , b "}, []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}, ""},
		{"zero slots", []string{"a:0"}, nil, "positive integer"},
		{"bad slots", []string{"a:x"}, nil, "positive integer"},
		{"empty entry", []string{"a,,b"}, nil, "empty host name"},
		{"empty name", []string{":2"}, nil, "empty host name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHostList(tc.specs)
			testenv.WantResult(t, got, err, tc.want, tc.wantErr)
		})
	}
}

func TestParseHostfile(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []Host
		wantErr string
	}{
		{"openmpi syntax", "# cluster\nnode1 slots=8 max_slots=16\n\nnode2 slots=4   # half\n  node3\n",
			[]Host{{Name: "node1", Slots: 8, MaxSlots: 16}, {Name: "node2", Slots: 4}, {Name: "node3", Slots: 1}}, ""},
		{"duplicate adds slots", "a slots=2\nb\na slots=3\n", []Host{{Name: "a", Slots: 5}, {Name: "b", Slots: 1}}, ""},
		{"duplicate adds max_slots", "a slots=2 max_slots=4\na slots=1 max_slots=1\n", []Host{{Name: "a", Slots: 3, MaxSlots: 5}}, ""},
		{"uncapped duplicate uncaps", "a slots=2 max_slots=4\na\n", []Host{{Name: "a", Slots: 3}}, ""},
		{"tabs and CRLF-free whitespace", "a\tslots=2\n", []Host{{Name: "a", Slots: 2}}, ""},
		{"bad slots value", "a slots=2\n# x\nb slots=zero\n", nil, "line 3"},
		{"unknown key", "a slots=2 cpus=4\n", nil, `line 1: "cpus=4": unknown key "cpus"`},
		{"no equals", "a 4\n", nil, "line 1"},
		{"max below slots", "\n\na slots=4 max_slots=2\n", nil, "line 3: host a: max_slots=2 is below slots=4"},
		{"key twice", "a slots=1 slots=2\n", nil, "slots given twice"},
		{"key first", "slots=2\n", nil, "expected a host name first"},
		{"only comments", "# nothing\n\n", nil, "no hosts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHostfile(strings.NewReader(tc.text), "hf")
			testenv.WantResult(t, got, err, tc.want, tc.wantErr)
		})
	}
}
