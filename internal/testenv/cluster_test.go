package testenv

import (
	"slices"
	"testing"
)

func TestParseTestcluster(t *testing.T) {
	full := "TC_DIR=\"/tmp/flexlink-testcluster-x\"\nTC_SSH_CONFIG=\"/tmp/flexlink-testcluster-x/ssh_config\"\nTC_HOSTS=\"10.79.1.1 10.79.2.1\"\n"
	for _, tc := range []struct {
		name, out string
		n         int
		want      Testcluster // zero: an error
	}{
		{"two hosts", full, 2, Testcluster{Dir: "/tmp/flexlink-testcluster-x", SSHConfig: "/tmp/flexlink-testcluster-x/ssh_config", Hosts: []string{"10.79.1.1", "10.79.2.1"}}},
		{"unquoted, other lines", "starting\nTC_SSH_CONFIG=/c\nTC_HOSTS=a b c\n", 3, Testcluster{SSHConfig: "/c", Hosts: []string{"a", "b", "c"}}},
		{"fewer hosts than wanted", full, 3, Testcluster{}},
		{"no ssh config", "TC_HOSTS=\"a b\"\n", 2, Testcluster{}},
		{"nothing", "", 2, Testcluster{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTestcluster(tc.out, tc.n)
			if wantErr := tc.want.SSHConfig == ""; (err != nil) != wantErr {
				t.Fatalf("error %v, want an error: %v", err, wantErr)
			}
			if got.Dir != tc.want.Dir || got.SSHConfig != tc.want.SSHConfig || !slices.Equal(got.Hosts, tc.want.Hosts) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
