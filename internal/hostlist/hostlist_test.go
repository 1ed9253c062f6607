package hostlist

import (
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

func TestExpand(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"node1", []string{"node1"}, ""},
		{"a,b,c", []string{"a", "b", "c"}, ""},
		{"node[01-04,07]", []string{"node01", "node02", "node03", "node04", "node07"}, ""},
		{"node[8-11]", []string{"node8", "node9", "node10", "node11"}, ""},
		{"node[08-11]", []string{"node08", "node09", "node10", "node11"}, ""},
		{"n[001-002]", []string{"n001", "n002"}, ""},
		{"n[0-2]", []string{"n0", "n1", "n2"}, ""},
		{"a[1-2]b[3-4]", []string{"a1b3", "a1b4", "a2b3", "a2b4"}, ""},
		{"rack[1-2]-node[01-02]", []string{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}, ""},
		{"gpu[9-10]-ib", []string{"gpu9-ib", "gpu10-ib"}, ""},
		{"x[1,3],y,z[5-6]", []string{"x1", "x3", "y", "z5", "z6"}, ""},
		{"[1-2]", []string{"1", "2"}, ""},
		{"h[3]", []string{"h3"}, ""},
		{"10.77.0.[1-2]", []string{"10.77.0.1", "10.77.0.2"}, ""},
		{"a,a", []string{"a", "a"}, ""},
		{"node[1-3", nil, "unclosed"},
		{"node1-3]", nil, "unmatched ']'"},
		{"node[[1]]", nil, "nested"},
		{"node[]", nil, "empty brackets"},
		{"node[3-1]", nil, "backwards"},
		{"node[a-b]", nil, "not a number"},
		{"node[1-]", nil, "not a number"},
		{"node[-1]", nil, "not a number"},
		{"a,,b", nil, "empty host name"},
		{"", nil, "empty host name"},
		{"n[0-99999999]", nil, "more than"},
		{"a[0-9999]b[0-9999]", nil, "more than"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Expand(tc.in)
			testenv.WantResult(t, got, err, tc.want, tc.wantErr)
		})
	}
}

func TestTasksPerNode(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{"4", []int{4}, ""},
		{"2(x3),1", []int{2, 2, 2, 1}, ""},
		{"1,2(x2)", []int{1, 2, 2}, ""},
		{"8(x1)", []int{8}, ""},
		{"0,3", []int{0, 3}, ""},
		{"", nil, "not a task count"},
		{"x", nil, "not a task count"},
		{"2(x0)", nil, "want N(xK)"},
		{"2(x3", nil, "want N(xK)"},
		{"2(xa)", nil, "want N(xK)"},
		{"-1", nil, "not a task count"},
		{"1(x2000000)", nil, "more than"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := TasksPerNode(tc.in)
			testenv.WantResult(t, got, err, tc.want, tc.wantErr)
		})
	}
}
