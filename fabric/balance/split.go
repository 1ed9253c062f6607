package balance

import "math"

// Part is the byte range [Off, Off+Len) of a message that goes over Link.
type Part struct {
	Link     int
	Off, Len int
}

// divide rounds cumulative shares, not each share, to the alignment: the
// rounding errors then do not add up, and no part can go negative.
func divide(shares []Share, bytes, align int) []Part {
	if len(shares) == 0 {
		return nil
	}
	if bytes <= 0 {
		return []Part{{Link: shares[0].Link}}
	}
	align = max(align, 1)
	total := 0.0
	for _, s := range shares {
		total += s.Fraction
	}
	parts := make([]Part, 0, len(shares))
	cum, off := 0.0, 0
	for i, s := range shares {
		cum += s.Fraction
		end := bytes
		if i < len(shares)-1 {
			end = int(math.Round(cum/total*float64(bytes)/float64(align))) * align
			end = min(max(end, off), bytes)
		}
		if end > off {
			parts = append(parts, Part{Link: s.Link, Off: off, Len: end - off})
		}
		off = end
	}
	return parts
}
