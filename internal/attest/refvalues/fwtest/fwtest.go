// Package fwtest builds synthetic guest firmware for tests: OVMF and
// TDVF images with the GUID table, SEV metadata and TDVF descriptor real
// images end with, laid out here apart from the parsers that read them.
// Nothing in them boots.
package fwtest

import (
	"bytes"
	"encoding/binary"

	"github.com/google/uuid"
)

const pageSize = 4096

// guid is a GUID in firmware's byte order: its first three fields little
// endian.
func guid(s string) []byte {
	u := uuid.MustParse(s)
	b := u[:]
	return []byte{b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]}
}

type entry struct {
	guid []byte
	data []byte
}

// withTable lays entries out as the firmware's reset vector does: each
// entry's data, its length (data + 18) and its GUID, the first entry
// nearest the footer; then the table's length, the footer GUID, and the
// last 32 bytes of the image.
func withTable(fw []byte, entries ...entry) []byte {
	var table []byte
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		table = append(table, e.data...)
		table = binary.LittleEndian.AppendUint16(table, uint16(len(e.data)+18)) //nolint:gosec // a test's few bytes
		table = append(table, e.guid...)
	}
	table = binary.LittleEndian.AppendUint16(table, uint16(len(table)+18)) //nolint:gosec // a test's few bytes
	table = append(table, guid("96b582de-1fb2-45f7-baea-a366c55a082d")...)
	copy(fw[len(fw)-32-len(table):], table)
	return fw
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// SEVSection is an SEV metadata section: its GPA, size and type.
type SEVSection struct{ GPA, Size, Type uint32 }

// OVMF is pages of patterned firmware with SEV metadata (at the start of
// its second page) naming sections, an SEV-ES reset block and, if
// hashTable is not 0, a kernel hashes table at that GPA.
func OVMF(pages int, sections []SEVSection, resetEIP, hashTable uint32) []byte {
	fw := make([]byte, pages*pageSize)
	for i := range fw {
		fw[i] = byte(i*7 + i/pageSize)
	}
	meta := pageSize
	var m bytes.Buffer
	m.WriteString("ASEV")
	_ = binary.Write(&m, binary.LittleEndian, uint32(16+12*len(sections))) //nolint:gosec // a test's few sections
	_ = binary.Write(&m, binary.LittleEndian, uint32(1))
	_ = binary.Write(&m, binary.LittleEndian, uint32(len(sections))) //nolint:gosec // a test's few sections
	for _, s := range sections {
		_ = binary.Write(&m, binary.LittleEndian, s)
	}
	copy(fw[meta:], m.Bytes())
	entries := []entry{
		{guid("dc886566-984a-4798-a75e-5585a7bf67cc"), u32(uint32(len(fw) - meta))}, //nolint:gosec // a test's image
		{guid("00f771de-1a7e-4fcb-890e-68c77e2fb44e"), append(u32(resetEIP), 0, 0, 0, 0)},
	}
	if hashTable != 0 {
		entries = append(entries, entry{guid("7255371f-3a3b-4b04-927b-1da6efa8d454"), append(u32(hashTable), u32(pageSize)...)})
	}
	return withTable(fw, entries...)
}

// TDVFSection is a TDVF descriptor's section.
type TDVFSection struct {
	DataOffset, RawDataSize       uint32
	MemoryAddress, MemoryDataSize uint64
	Type, Attributes              uint32
}

// TDVF is pages of patterned firmware whose TDVF descriptor (at the
// start of its first page) lists sections.
func TDVF(pages int, sections []TDVFSection) []byte {
	fw := make([]byte, pages*pageSize)
	for i := range fw {
		fw[i] = byte(i*13 + 5)
	}
	var d bytes.Buffer
	d.WriteString("TDVF")
	_ = binary.Write(&d, binary.LittleEndian, uint32(16+32*len(sections))) //nolint:gosec // a test's few sections
	_ = binary.Write(&d, binary.LittleEndian, uint32(1))
	_ = binary.Write(&d, binary.LittleEndian, uint32(len(sections))) //nolint:gosec // a test's few sections
	for _, s := range sections {
		_ = binary.Write(&d, binary.LittleEndian, s)
	}
	copy(fw[0:], d.Bytes())
	return withTable(fw, entry{guid("e47a6535-984a-4798-865e-4685a7bf8ec2"), u32(uint32(len(fw)))}) //nolint:gosec // a test's image
}
