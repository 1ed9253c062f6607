package topo

import "time"

// NominalNVLinkBW returns one NVLink's bandwidth in bytes/s in one
// direction for an NVLink version, or 0 for a version not in the table.
// The figures are the data-sheet rates; version 4 (H100/H200/H800) is the
// 26.6 GB/s per link per direction seen on the H200 machine of DESIGN.md.
func NominalNVLinkBW(version int) float64 {
	switch version {
	case 1: // P100
		return 20e9
	case 2: // V100
		return 25e9
	case 3: // A100
		return 25e9
	case 4: // H100, H200, H800
		return 26.6e9
	case 5: // B200
		return 50e9
	}
	return 0
}

// pcieGen is one PCIe generation: the lowest link rate (GT/s) taken for
// it, and a lane's bandwidth in bytes/s in one direction after line
// encoding.
type pcieGen struct {
	minGTs, perLane float64
}

// pcieGens are PCIe generations 1 to 6.
func pcieGens() [6]pcieGen {
	return [6]pcieGen{
		{2.4, 2.5e9 * 8 / 10 / 8},
		{4.9, 5e9 * 8 / 10 / 8},
		{7.9, 8e9 * 128 / 130 / 8},
		{15, 16e9 * 128 / 130 / 8},
		{31, 32e9 * 128 / 130 / 8},
		{63, 64e9 * 242 / 256 / 8}, // FLIT mode
	}
}

// PCIeBW returns the bandwidth of a PCIe link in bytes/s in one direction
// after line encoding, or 0 when gen or width is unknown.
func PCIeBW(gen, width int) float64 {
	if gen < 1 || gen > len(pcieGens()) {
		return 0
	}
	return pcieGens()[gen-1].perLane * float64(width)
}

// PCIeGenFromRate maps a link rate in GT/s to a PCIe generation (0 when
// unrecognised).
func PCIeGenFromRate(gts float64) int {
	gens := pcieGens()
	for g := len(gens); g >= 1; g-- {
		if gts >= gens[g-1].minGTs {
			return g
		}
	}
	return 0
}

// Nominal figures for links whose speed the topology does not carry. They
// are planning defaults for the balancer's first stage, which its second
// stage replaces with measured rates.
const (
	// NominalShmBW: a shared-memory ring copies twice through host memory
	// (≈18 GB/s memcpy on the developer machines of DESIGN.md).
	NominalShmBW = 9e9
	// NominalTCPBW is used when neither host's NIC speed is known.
	NominalTCPBW = 1.25e9 // 10 Gb/s

	NominalNVLinkLatency = 3 * time.Microsecond
	NominalPCIeLatency   = 10 * time.Microsecond
	NominalShmLatency    = 2 * time.Microsecond
	NominalNetLatency    = 5 * time.Microsecond
	NominalTCPLatency    = 30 * time.Microsecond
)
