package eif

import (
	"bytes"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// header is what the file header says.
type header struct {
	arm64          bool
	memoryMiB      uint64
	cpus           uint64
	offsets, sizes []uint64
	crc            uint32
}

// readHeader checks the file header of a file of size bytes.
func readHeader(h []byte, size uint64) (*header, error) {
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
	hd := &header{arm64: be.Uint16(h[6:]) == FlagARM64, cpus: be.Uint64(h[16:]), crc: be.Uint32(h[HeaderSize-4:])}
	mem := be.Uint64(h[8:])
	if mem%(1<<20) != 0 || mem == 0 || hd.cpus == 0 {
		return nil, fmt.Errorf("eif: default memory %d bytes and %d CPUs: want whole MiB and at least one CPU", mem, hd.cpus)
	}
	hd.memoryMiB = mem >> 20
	if hd.memoryMiB > maxMemoryMiB || hd.cpus > maxCPUs {
		return nil, fmt.Errorf("eif: %d MiB and %d CPUs by default: out of range", hd.memoryMiB, hd.cpus)
	}
	n := int(be.Uint16(h[26:]))
	if n < 4 || n > MaxSections {
		return nil, fmt.Errorf("eif: %d sections; want a kernel, a command line, metadata and ramdisks, at most %d", n, MaxSections)
	}
	offset := uint64(HeaderSize)
	for i := range MaxSections {
		off, sz := be.Uint64(h[28+8*i:]), be.Uint64(h[28+8*MaxSections+8*i:])
		if i >= n {
			if off != 0 || sz != 0 {
				return nil, fmt.Errorf("eif: section %d is beyond the %d the header counts", i, n)
			}
			continue
		}
		if off != offset {
			return nil, fmt.Errorf("eif: section %d at offset %d, want %d (sections follow each other)", i, off, offset)
		}
		if sz > size || offset+SectionHeaderSize+sz > size {
			return nil, fmt.Errorf("eif: section %d of %d bytes runs past the end of the file", i, sz)
		}
		if i == 0 && sz == 0 {
			return nil, errors.New("eif: no kernel")
		}
		if i == 1 && sz > MaxCmdline {
			return nil, fmt.Errorf("eif: a command line of %d bytes; the kernel takes at most %d", sz, MaxCmdline)
		}
		hd.offsets, hd.sizes = append(hd.offsets, off), append(hd.sizes, sz)
		offset += SectionHeaderSize + sz
	}
	if offset != size {
		return nil, fmt.Errorf("eif: %d bytes after the last section", size-offset)
	}
	return hd, nil
}

// scan reads an EIF of size bytes from r in one pass, checking it as
// Parse says, and hands each section's body to visit in file order
// (visit must read it whole). The file's CRC is checked at the end, so a
// caller keeps nothing it was given before scan returns without error.
func scan(r io.Reader, size uint64, visit func(typ SectionType, size uint64, body io.Reader) error) (*header, error) {
	if size < HeaderSize {
		return nil, fmt.Errorf("eif: %d bytes, shorter than the %d-byte header", size, HeaderSize)
	}
	h := make([]byte, HeaderSize)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, fmt.Errorf("eif: reading the header: %w", err)
	}
	hd, err := readHeader(h, size)
	if err != nil {
		return nil, err
	}
	crc := crc32.NewIEEE()
	_, _ = crc.Write(h[:HeaderSize-4])
	var order sectionOrder
	for i, sz := range hd.sizes {
		sh := make([]byte, SectionHeaderSize)
		if _, err := io.ReadFull(r, sh); err != nil {
			return nil, fmt.Errorf("eif: reading section %d: %w", i, err)
		}
		typ := SectionType(binary.BigEndian.Uint16(sh))
		if binary.BigEndian.Uint16(sh[2:]) != 0 || binary.BigEndian.Uint64(sh[4:]) != sz {
			return nil, fmt.Errorf("eif: section %d's header disagrees with the file header", i)
		}
		if err := order.next(i, typ); err != nil {
			return nil, err
		}
		_, _ = crc.Write(sh)
		body := &io.LimitedReader{R: io.TeeReader(r, crc), N: int64(sz)} //nolint:gosec // sz is bounded by size
		var in io.Reader = body
		if typ == SectionCmdline {
			cmdline, err := io.ReadAll(body)
			if err != nil || body.N != 0 {
				return nil, fmt.Errorf("eif: reading the command line: %w", errors.Join(err, io.ErrUnexpectedEOF))
			}
			if bytes.IndexByte(cmdline, 0) >= 0 {
				return nil, errors.New("eif: the command line holds a NUL")
			}
			in = bytes.NewReader(cmdline)
		}
		if err := visit(typ, sz, in); err != nil {
			return nil, err
		}
		if body.N != 0 {
			if _, err := io.Copy(io.Discard, body); err != nil || body.N != 0 {
				return nil, fmt.Errorf("eif: reading section %d: %w", i, errors.Join(err, io.ErrUnexpectedEOF))
			}
		}
	}
	if order.ramdisks == 0 {
		return nil, errors.New("eif: no ramdisk")
	}
	if got := crc.Sum32(); got != hd.crc {
		return nil, fmt.Errorf("eif: CRC %#08x, the header says %#08x: the file is damaged", got, hd.crc)
	}
	return hd, nil
}

// sectionOrder holds sections to nitro-cli's order: kernel, command
// line, metadata, ramdisks, an optional signature last.
type sectionOrder struct {
	ramdisks int
	signed   bool
}

func (o *sectionOrder) next(i int, typ SectionType) error {
	want := SectionRamdisk
	switch {
	case i < 3:
		want = []SectionType{SectionKernel, SectionCmdline, SectionMetadata}[i]
	case typ == SectionSignature && !o.signed:
		want = SectionSignature
	}
	if typ != want || o.signed {
		return fmt.Errorf("eif: section %d is a %s section, want %s (nitro-cli's order: kernel, cmdline, metadata, ramdisks, signature)", i, typ, want)
	}
	o.signed = typ == SectionSignature
	if typ == SectionRamdisk {
		o.ramdisks++
	}
	return nil
}

// Parse reads an EIF strictly: the header and every section header must
// agree, sections must follow each other in nitro-cli's order (kernel,
// command line, metadata, ramdisks, an optional signature) with nothing
// between or after them, and the CRC must match. Writing what it returns
// gives back the same bytes. The caller bounds len(data).
func Parse(data []byte) (*Image, error) {
	img := &Image{}
	hd, err := scan(bytes.NewReader(data), uint64(len(data)), func(typ SectionType, _ uint64, body io.Reader) error {
		b, err := io.ReadAll(body)
		if err != nil {
			return err
		}
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
	})
	if err != nil {
		return nil, err
	}
	img.ARM64, img.MemoryMiB, img.CPUs = hd.arm64, hd.memoryMiB, hd.cpus
	if err := img.validate(); err != nil {
		return nil, err
	}
	return img, nil
}

// MeasureFile computes the PCRs of the EIF of size bytes that r reads,
// in one pass and without holding it (an image is hundreds of
// megabytes), checking it as Parse does.
func MeasureFile(r io.Reader, size int64) (PCRs, error) {
	if size < 0 {
		return PCRs{}, errors.New("eif: negative size")
	}
	all, boot, app := sha512.New384(), sha512.New384(), sha512.New384()
	ramdisks := 0
	_, err := scan(r, uint64(size), func(typ SectionType, _ uint64, body io.Reader) error {
		var to []hash.Hash
		switch typ {
		case SectionKernel, SectionCmdline:
			to = []hash.Hash{all, boot}
		case SectionRamdisk:
			to = []hash.Hash{all, app}
			if ramdisks == 0 {
				to = []hash.Hash{all, boot}
			}
			ramdisks++
		default:
			return nil
		}
		_, err := io.Copy(io.MultiWriter(to[0], to[1]), body)
		return err
	})
	if err != nil {
		return PCRs{}, err
	}
	return PCRs{PCR0: extend(all.Sum(nil)), PCR1: extend(boot.Sum(nil)), PCR2: extend(app.Sum(nil))}, nil
}
