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

// PCIeBW returns the bandwidth of a PCIe link in bytes/s in one direction
// after line encoding, or 0 when gen or width is unknown.
func PCIeBW(gen, width int) float64 {
	perLane := map[int]float64{
		1: 2.5e9 * 8 / 10 / 8,
		2: 5e9 * 8 / 10 / 8,
		3: 8e9 * 128 / 130 / 8,
		4: 16e9 * 128 / 130 / 8,
		5: 32e9 * 128 / 130 / 8,
		6: 64e9 * 242 / 256 / 8, // FLIT mode
	}[gen]
	return perLane * float64(width)
}

// PCIeGenFromRate maps a link rate in GT/s to a PCIe generation (0 when
// unrecognised).
func PCIeGenFromRate(gts float64) int {
	switch {
	case gts >= 63:
		return 6
	case gts >= 31:
		return 5
	case gts >= 15:
		return 4
	case gts >= 7.9:
		return 3
	case gts >= 4.9:
		return 2
	case gts >= 2.4:
		return 1
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
