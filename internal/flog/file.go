package flog

import (
	"strconv"
	"strings"
)

// ExpandPath fills in a FLEXLINK_DEBUG_FILE pattern like NCCL_DEBUG_FILE:
// %h is the host name, %p the process id, %r the rank and %% a percent
// sign; any other % sequence is kept as written.
func ExpandPath(pattern, host string, pid, rank int) string {
	if !strings.Contains(pattern, "%") {
		return pattern
	}
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c != '%' || i+1 == len(pattern) {
			b.WriteByte(c)
			continue
		}
		i++
		switch pattern[i] {
		case 'h':
			b.WriteString(host)
		case 'p':
			b.WriteString(strconv.Itoa(pid))
		case 'r':
			b.WriteString(strconv.Itoa(rank))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(pattern[i])
		}
	}
	return b.String()
}
