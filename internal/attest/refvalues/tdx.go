package refvalues

import (
	"crypto/sha512"
	"encoding/binary"
	"fmt"
)

// TDVF section types and attributes (TDVF design guide, table
// "TDVF_SECTION").
// (BFV 0, CFV 1, TD HOB 2, temporary memory 3 are measured by address,
// and by content where the section says MR_EXTEND.)
const (
	tdvfPermMem      = 4
	tdvfPayloadParam = 6      // the last type known
	tdvfMRExtend     = 1 << 0 // the section's content is measured
	tdvfPageAug      = 1 << 1 // added after launch, not measured
)

type tdvfSection struct {
	DataOffset, RawDataSize uint32
	MemoryAddress           uint64
	MemoryDataSize          uint64
	Type, Attributes        uint32
}

// tdvfSections reads the TDVF descriptor the firmware's GUID table points
// at.
func tdvfSections(fw []byte) ([]tdvfSection, error) {
	entries, err := footerTable(fw)
	if err != nil {
		return nil, err
	}
	items, err := metadataItems(fw, entries, tdxMetadataGUID, "TDVF", 32)
	if err != nil {
		return nil, err
	}
	var out []tdvfSection
	for i, p := range items {
		s := tdvfSection{
			DataOffset: binary.LittleEndian.Uint32(p), RawDataSize: binary.LittleEndian.Uint32(p[4:]),
			MemoryAddress: binary.LittleEndian.Uint64(p[8:]), MemoryDataSize: binary.LittleEndian.Uint64(p[16:]),
			Type: binary.LittleEndian.Uint32(p[24:]), Attributes: binary.LittleEndian.Uint32(p[28:]),
		}
		switch {
		case s.Type > tdvfPayloadParam:
			return nil, fmt.Errorf("firmware: TDVF section %d has type %d, which is not known", i, s.Type)
		case s.MemoryAddress%pageSize != 0 || s.MemoryDataSize%pageSize != 0 || s.MemoryDataSize > 1<<32:
			return nil, fmt.Errorf("firmware: TDVF section %d at %#x of %#x bytes is not whole pages", i, s.MemoryAddress, s.MemoryDataSize)
		case uint64(s.RawDataSize) > s.MemoryDataSize || uint64(s.DataOffset)+uint64(s.RawDataSize) > uint64(len(fw)):
			return nil, fmt.Errorf("firmware: TDVF section %d's data (%d bytes at %d) is not in the image or its memory", i, s.RawDataSize, s.DataOffset)
		}
		out = append(out, s)
	}
	return out, nil
}

// TDXMRTD computes a TD's MRTD from its firmware (TDVF), as the TDX
// module builds it while the VMM adds the firmware's sections page by
// page: TDH.MEM.PAGE.ADD measures each page's GPA, and for sections to
// be measured TDH.MR.EXTEND each 256-byte chunk's GPA and content.
// Permanent memory, and sections added after launch, are not measured.
func TDXMRTD(firmware []byte) ([]byte, error) {
	sections, err := tdvfSections(firmware)
	if err != nil {
		return nil, err
	}
	h := sha512.New384()
	var block [128]byte
	op := func(name string, gpa uint64) {
		clear(block[:])
		copy(block[:], name)
		binary.LittleEndian.PutUint64(block[16:], gpa)
		h.Write(block[:])
	}
	for _, s := range sections {
		if s.Type == tdvfPermMem || s.Attributes&tdvfPageAug != 0 {
			continue
		}
		mem := make([]byte, s.MemoryDataSize)
		copy(mem, firmware[s.DataOffset:s.DataOffset+s.RawDataSize])
		for off := uint64(0); off < s.MemoryDataSize; off += pageSize {
			op("MEM.PAGE.ADD", s.MemoryAddress+off)
			if s.Attributes&tdvfMRExtend == 0 {
				continue
			}
			for chunk := off; chunk < off+pageSize; chunk += 256 {
				op("MR.EXTEND", s.MemoryAddress+chunk)
				h.Write(mem[chunk : chunk+256])
			}
		}
	}
	return h.Sum(nil), nil
}
