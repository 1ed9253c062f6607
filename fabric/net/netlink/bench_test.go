package netlink_test

import (
	"testing"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/linktest"
)

// BenchmarkTCP measures host tcp links (NewTCPEndpoint) over loopback
// between two goroutines of this process (OneWay, PingPong) and between
// this process and a helper process (TwoProcess).
func BenchmarkTCP(b *testing.B) {
	linktest.BenchSuite(b, []string{""}, func(b *testing.B, _ string) (fabric.Link, fabric.Link) {
		return tcpPair(b, nil)
	}, func(b *testing.B, _ string) (*linktest.Proc, fabric.Link) {
		job := newJob()
		return linktest.ConnectHelper(b, tcpEndpoint(b, config(job, 0, nil)), "TestHelperProcess", "tcp", "LINKTEST_JOB="+job)
	})
}
