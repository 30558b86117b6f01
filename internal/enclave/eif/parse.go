package eif

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Parse reads an EIF strictly: the header and every section header must
// agree, sections must follow each other in nitro-cli's order (kernel,
// command line, metadata, ramdisks, an optional signature) with nothing
// between or after them, and the CRC must match. Writing what it returns
// gives back the same bytes. The caller bounds len(data).
func Parse(data []byte) (*Image, error) {
	if len(data) < HeaderSize {
		return nil, fmt.Errorf("eif: %d bytes, shorter than the %d-byte header", len(data), HeaderSize)
	}
	h := data[:HeaderSize]
	be := binary.BigEndian
	switch {
	case string(h[:4]) != Magic:
		return nil, errors.New("eif: no .eif magic: not an enclave image file")
	case be.Uint16(h[4:]) != Version:
		return nil, fmt.Errorf("eif: version %d; this reads version %d", be.Uint16(h[4:]), Version)
	case be.Uint16(h[6:])&^FlagARM64 != 0:
		return nil, fmt.Errorf("eif: header flags %#x: unknown bits", be.Uint16(h[6:]))
	case be.Uint16(h[24:]) != 0 || be.Uint32(h[HeaderSize-8:]) != 0:
		return nil, errors.New("eif: reserved header fields are not zero")
	}
	img := &Image{ARM64: be.Uint16(h[6:]) == FlagARM64, CPUs: be.Uint64(h[16:])}
	mem := be.Uint64(h[8:])
	if mem%(1<<20) != 0 || mem == 0 || img.CPUs == 0 {
		return nil, fmt.Errorf("eif: default memory %d bytes and %d CPUs: want whole MiB and at least one CPU", mem, img.CPUs)
	}
	img.MemoryMiB = mem >> 20
	n := int(be.Uint16(h[26:]))
	if n < 4 || n > MaxSections {
		return nil, fmt.Errorf("eif: %d sections; want a kernel, a command line, metadata and ramdisks, at most %d", n, MaxSections)
	}
	crc := crc32.NewIEEE()
	_, _ = crc.Write(h[:HeaderSize-4])
	offset := uint64(HeaderSize)
	for i := range MaxSections {
		off, size := be.Uint64(h[28+8*i:]), be.Uint64(h[28+8*MaxSections+8*i:])
		if i >= n {
			if off != 0 || size != 0 {
				return nil, fmt.Errorf("eif: section %d is beyond the %d the header counts", i, n)
			}
			continue
		}
		if off != offset {
			return nil, fmt.Errorf("eif: section %d at offset %d, want %d (sections follow each other)", i, off, offset)
		}
		if size > uint64(len(data)) || offset+SectionHeaderSize+size > uint64(len(data)) {
			return nil, fmt.Errorf("eif: section %d of %d bytes runs past the end of the file", i, size)
		}
		sh := data[offset : offset+SectionHeaderSize]
		typ := SectionType(be.Uint16(sh))
		if be.Uint16(sh[2:]) != 0 || be.Uint64(sh[4:]) != size {
			return nil, fmt.Errorf("eif: section %d's header disagrees with the file header", i)
		}
		body := data[offset+SectionHeaderSize : offset+SectionHeaderSize+size]
		_, _ = crc.Write(sh)
		_, _ = crc.Write(body)
		if err := img.take(i, typ, body); err != nil {
			return nil, err
		}
		offset += SectionHeaderSize + size
	}
	if offset != uint64(len(data)) {
		return nil, fmt.Errorf("eif: %d bytes after the last section", uint64(len(data))-offset)
	}
	if len(img.Ramdisks) == 0 {
		return nil, errors.New("eif: no ramdisk")
	}
	if got, want := crc.Sum32(), be.Uint32(h[HeaderSize-4:]); got != want {
		return nil, fmt.Errorf("eif: CRC %#08x, the header says %#08x: the file is damaged", got, want)
	}
	if err := img.validate(); err != nil {
		return nil, err
	}
	return img, nil
}

// take keeps section i, which must come where nitro-cli writes it.
func (img *Image) take(i int, typ SectionType, body []byte) error {
	want := SectionRamdisk
	switch {
	case i < 3:
		want = []SectionType{SectionKernel, SectionCmdline, SectionMetadata}[i]
	case typ == SectionSignature && img.Signature == nil:
		want = SectionSignature
	}
	if typ != want || (img.Signature != nil) {
		return fmt.Errorf("eif: section %d is a %s section, want %s (nitro-cli's order: kernel, cmdline, metadata, ramdisks, signature)", i, typ, want)
	}
	// Copies, so the image does not hold the caller's buffer.
	b := append([]byte{}, body...)
	switch typ {
	case SectionKernel:
		img.Kernel = b
	case SectionCmdline:
		img.Cmdline = string(b)
	case SectionMetadata:
		img.Metadata = b
	case SectionRamdisk:
		img.Ramdisks = append(img.Ramdisks, b)
	case SectionSignature:
		img.Signature = b
	}
	return nil
}
