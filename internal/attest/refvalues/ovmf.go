package refvalues

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/google/uuid"
)

// guid is a GUID as firmware stores it: the first three fields little
// endian.
type guid [16]byte

func mustGUID(s string) guid {
	u := uuid.MustParse(s)
	var g guid
	// time_low, time_mid and time_hi little endian; the rest as written.
	g[0], g[1], g[2], g[3] = u[3], u[2], u[1], u[0]
	g[4], g[5], g[6], g[7] = u[5], u[4], u[7], u[6]
	copy(g[8:], u[8:])
	return g
}

// The GUIDs of the firmware's table (OVMF's ResetVector), which
// AMD's and Intel's firmware both end with.
var (
	footerGUID      = mustGUID("96b582de-1fb2-45f7-baea-a366c55a082d")
	sevMetadataGUID = mustGUID("dc886566-984a-4798-a75e-5585a7bf67cc")
	sevHashTable    = mustGUID("7255371f-3a3b-4b04-927b-1da6efa8d454")
	sevESResetBlock = mustGUID("00f771de-1a7e-4fcb-890e-68c77e2fb44e")
	tdxMetadataGUID = mustGUID("e47a6535-984a-4798-865e-4685a7bf8ec2")
)

// footerTable reads the GUIDed table at the end of a firmware image: the
// footer GUID 32 bytes before the end, the table's length before it,
// and entries (data, length, GUID) packed backwards before that.
func footerTable(fw []byte) (map[guid][]byte, error) {
	const tail = 32 // the reset vector after the table
	if len(fw) < tail+18 {
		return nil, fmt.Errorf("firmware: %d bytes, too small for its GUID table", len(fw))
	}
	end := len(fw) - tail
	if !bytes.Equal(fw[end-16:end], footerGUID[:]) {
		return nil, fmt.Errorf("firmware: no GUID table at its end (not an OVMF or TDVF image?)")
	}
	size := int(binary.LittleEndian.Uint16(fw[end-18 : end-16]))
	if size < 18 || size > end {
		return nil, fmt.Errorf("firmware: GUID table of %d bytes", size)
	}
	table := fw[end-size : end-18]
	entries := map[guid][]byte{}
	for len(table) > 0 {
		if len(table) < 18 {
			return nil, fmt.Errorf("firmware: GUID table ends in %d stray bytes", len(table))
		}
		var g guid
		copy(g[:], table[len(table)-16:])
		n := int(binary.LittleEndian.Uint16(table[len(table)-18 : len(table)-16]))
		if n < 18 || n > len(table) {
			return nil, fmt.Errorf("firmware: GUID table entry of %d bytes", n)
		}
		entries[g] = table[len(table)-n : len(table)-18]
		table = table[:len(table)-n]
	}
	return entries, nil
}

// metadataItems reads the metadata block a table entry points at (its
// offset from the image's end): signature, length, version, count, then
// count items of size bytes.
func metadataItems(fw []byte, entries map[guid][]byte, g guid, signature string, size int) ([][]byte, error) {
	off, err := entryU32(entries, g, signature+" metadata")
	if err != nil {
		return nil, err
	}
	start := len(fw) - int(off)
	if off == 0 || start < 0 || start+16 > len(fw) || string(fw[start:start+4]) != signature {
		return nil, fmt.Errorf("firmware: no %s metadata at %d bytes from its end", signature, off)
	}
	n := int(binary.LittleEndian.Uint32(fw[start+12:]))
	if n > 64 || start+16+size*n > len(fw) {
		return nil, fmt.Errorf("firmware: %d %s metadata sections", n, signature)
	}
	items := make([][]byte, n)
	for i := range items {
		items[i] = fw[start+16+size*i : start+16+size*(i+1)]
	}
	return items, nil
}

// entryU32 reads a table entry's leading 32-bit value.
func entryU32(entries map[guid][]byte, g guid, what string) (uint32, error) {
	e, ok := entries[g]
	if !ok {
		return 0, fmt.Errorf("firmware: no %s in its GUID table", what)
	}
	if len(e) < 4 {
		return 0, fmt.Errorf("firmware: %s entry of %d bytes", what, len(e))
	}
	return binary.LittleEndian.Uint32(e), nil
}

// SEV metadata section types (OvmfPkg/ResetVector's OvmfSevMetadata).
const (
	sectionSecMemory    = 1
	sectionSecrets      = 2
	sectionCPUID        = 3
	sectionSVSMCAA      = 4
	sectionKernelHashes = 0x10
)

type sevSection struct {
	GPA, Size, Type uint32
}

// ovmf is an OVMF image as SEV-SNP measures it.
type ovmf struct {
	data     []byte
	sections []sevSection
	// resetEIP is where the APs start (SEV-ES reset block).
	resetEIP uint32
	// hashTable is the GPA of the kernel hashes table, 0 without one.
	hashTable uint32
}

func parseOVMF(fw []byte) (*ovmf, error) {
	if len(fw) == 0 || len(fw)%pageSize != 0 {
		return nil, fmt.Errorf("firmware: %d bytes, not whole pages", len(fw))
	}
	entries, err := footerTable(fw)
	if err != nil {
		return nil, err
	}
	o := &ovmf{data: fw}
	if o.resetEIP, err = entryU32(entries, sevESResetBlock, "SEV-ES reset block"); err != nil {
		return nil, err
	}
	if _, ok := entries[sevHashTable]; ok {
		if o.hashTable, err = entryU32(entries, sevHashTable, "SEV hash table"); err != nil {
			return nil, err
		}
	}
	items, err := metadataItems(fw, entries, sevMetadataGUID, "ASEV", 12)
	if err != nil {
		return nil, err
	}
	for i, p := range items {
		s := sevSection{GPA: binary.LittleEndian.Uint32(p), Size: binary.LittleEndian.Uint32(p[4:]), Type: binary.LittleEndian.Uint32(p[8:])}
		if s.GPA%pageSize != 0 || s.Size%pageSize != 0 || s.Size == 0 {
			return nil, fmt.Errorf("firmware: SEV metadata section %d (type %d) at %#x of %#x bytes is not whole pages", i, s.Type, s.GPA, s.Size)
		}
		o.sections = append(o.sections, s)
	}
	return o, nil
}

// gpa is where the image sits: just below 4 GiB.
func (o *ovmf) gpa() uint64 { return 1<<32 - uint64(len(o.data)) }
