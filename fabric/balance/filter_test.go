package balance

import (
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/settings"
)

func TestFilterLinks(t *testing.T) {
	links := []LinkSpec{
		nominal(0, fabric.KindNVLink, 400, time.Microsecond),
		nominal(1, fabric.KindPCIe, 50, time.Microsecond),
		nominal(2, fabric.KindNet, 25, time.Microsecond),
	}
	for _, tc := range []struct {
		value   string
		want    []int // ids kept; nil with wantErr
		wantErr bool
	}{
		{"", []int{0, 1, 2}, false},
		{"nvlink", []int{0}, false},
		{"nvlink,pcie", []int{0, 1}, false},
		{" PCIe , net ", []int{1, 2}, false},
		{"net,", []int{2}, false},
		{"nvlnk", nil, true}, // typo: an error, not an empty set
		{"shm", nil, true},   // a real kind this pair lacks: nothing left
		{"pcie,bogus", nil, true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			env := settings.Map(map[string]string{"FLEXLINK_LINKS": tc.value})
			got, err := FilterLinks(links, env)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("FLEXLINK_LINKS=%q accepted: %v", tc.value, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []int
			for _, l := range got {
				ids = append(ids, l.ID)
			}
			if len(ids) != len(tc.want) {
				t.Fatalf("FLEXLINK_LINKS=%q kept %v, want %v", tc.value, ids, tc.want)
			}
			for i := range ids {
				if ids[i] != tc.want[i] {
					t.Fatalf("FLEXLINK_LINKS=%q kept %v, want %v", tc.value, ids, tc.want)
				}
			}
		})
	}
}
