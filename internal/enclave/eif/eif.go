// Package eif owns the Nitro Enclaves image format (EIF, version 4, as
// AWS's aws-nitro-enclaves-image-format defines it and nitro-cli boots
// it): writing an image reproducibly, reading one strictly, and its
// measurements, PCR0 to PCR2, which a Nitro Enclave's attestation
// document carries and a policy pins.
package eif

import (
	"bytes"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The format's fixed sizes and version.
const (
	Magic             = ".eif"
	Version           = 4
	HeaderSize        = 548
	SectionHeaderSize = 12
	MaxSections       = 32
	// FlagARM64 marks an image for Graviton (aarch64); clear for x86_64.
	FlagARM64 = 0x1
	// MaxCmdline is the longest kernel command line (arm64's limit; x86's
	// is 2048).
	MaxCmdline = 4096
	// The largest defaults an image may name.
	maxMemoryMiB = 1 << 40
	maxCPUs      = 1 << 16
)

// SectionType says what a section holds.
type SectionType uint16

// The section types of version 4.
const (
	SectionInvalid SectionType = iota
	SectionKernel
	SectionCmdline
	SectionRamdisk
	SectionSignature
	SectionMetadata
)

func (t SectionType) String() string {
	switch t {
	case SectionKernel:
		return "kernel"
	case SectionCmdline:
		return "cmdline"
	case SectionRamdisk:
		return "ramdisk"
	case SectionSignature:
		return "signature"
	case SectionMetadata:
		return "metadata"
	}
	return fmt.Sprintf("type %d", uint16(t))
}

// Image is what an EIF holds.
type Image struct {
	// Kernel is the enclave's kernel (bzImage on x86_64, Image on aarch64).
	Kernel []byte
	// Cmdline is the kernel's command line, without a NUL.
	Cmdline string
	// Ramdisks are initramfs archives: the first boots (init, the Nitro
	// Secure Module's driver) and is measured into PCR1; the others are
	// the application, measured into PCR2.
	Ramdisks [][]byte
	// Metadata describes the build (JSON); not measured.
	Metadata []byte
	// Signature is a signed image's signature section (PCR8's
	// certificate), kept as read; Cloister does not sign.
	Signature []byte
	// ARM64 marks an image for aarch64.
	ARM64 bool
	// MemoryMiB and CPUs are the defaults the image names (nitro-cli's
	// arguments decide); 1024 and 2 when zero.
	MemoryMiB, CPUs uint64
}

// PCRs are the measurements of an image: PCR0 of the kernel, command
// line and every ramdisk; PCR1 of the kernel, command line and the boot
// ramdisk; PCR2 of the application's ramdisks. Each is a register
// extended once from zero: SHA-384(zeros ‖ SHA-384(data)).
type PCRs struct {
	PCR0, PCR1, PCR2 [sha512.Size384]byte
}

// Hex is each register as the attestation document and nitro-cli print
// it, lowercase hex.
func (p PCRs) Hex() (pcr0, pcr1, pcr2 string) {
	return hex.EncodeToString(p.PCR0[:]), hex.EncodeToString(p.PCR1[:]), hex.EncodeToString(p.PCR2[:])
}

// Measure computes the PCRs of an image's kernel, command line and
// ramdisks.
func Measure(img *Image) PCRs {
	all, boot, app := sha512.New384(), sha512.New384(), sha512.New384()
	for _, h := range []io.Writer{all, boot} {
		_, _ = h.Write(img.Kernel)
		_, _ = io.WriteString(h, img.Cmdline)
	}
	for i, r := range img.Ramdisks {
		_, _ = all.Write(r)
		if i == 0 {
			_, _ = boot.Write(r)
		} else {
			_, _ = app.Write(r)
		}
	}
	return PCRs{PCR0: extend(all.Sum(nil)), PCR1: extend(boot.Sum(nil)), PCR2: extend(app.Sum(nil))}
}

// extend is a register's value after one extension from zero.
func extend(digest []byte) [sha512.Size384]byte {
	var zero [sha512.Size384]byte
	return sha512.Sum384(append(zero[:], digest...))
}

// section is one section in file order.
type section struct {
	typ  SectionType
	data []byte
}

// sections are img's sections in the order nitro-cli writes them:
// kernel, command line, metadata, the ramdisks, and a signature if any.
func (img *Image) sections() []section {
	s := []section{{SectionKernel, img.Kernel}, {SectionCmdline, []byte(img.Cmdline)}, {SectionMetadata, img.Metadata}}
	for _, r := range img.Ramdisks {
		s = append(s, section{SectionRamdisk, r})
	}
	if img.Signature != nil {
		s = append(s, section{SectionSignature, img.Signature})
	}
	return s
}

// Write writes img as an EIF and returns its PCRs. The same image always
// gives the same bytes.
func (img *Image) Write(w io.Writer) (PCRs, error) {
	if err := img.validate(); err != nil {
		return PCRs{}, err
	}
	sections := img.sections()
	header := make([]byte, HeaderSize)
	copy(header, Magic)
	binary.BigEndian.PutUint16(header[4:], Version)
	if img.ARM64 {
		binary.BigEndian.PutUint16(header[6:], FlagARM64)
	}
	binary.BigEndian.PutUint64(header[8:], orDefault(img.MemoryMiB, 1024)<<20)
	binary.BigEndian.PutUint64(header[16:], orDefault(img.CPUs, 2))
	binary.BigEndian.PutUint16(header[26:], uint16(len(sections))) //nolint:gosec // validate bounds it by MaxSections
	offset := uint64(HeaderSize)
	for i, s := range sections {
		binary.BigEndian.PutUint64(header[28+8*i:], offset)
		binary.BigEndian.PutUint64(header[28+8*MaxSections+8*i:], uint64(len(s.data)))
		offset += SectionHeaderSize + uint64(len(s.data))
	}
	crc := crc32.NewIEEE()
	_, _ = crc.Write(header[:HeaderSize-4])
	for _, s := range sections {
		_, _ = crc.Write(sectionHeader(s))
		_, _ = crc.Write(s.data)
	}
	binary.BigEndian.PutUint32(header[HeaderSize-4:], crc.Sum32())
	if _, err := w.Write(header); err != nil {
		return PCRs{}, err
	}
	for _, s := range sections {
		if _, err := w.Write(sectionHeader(s)); err != nil {
			return PCRs{}, err
		}
		if _, err := w.Write(s.data); err != nil {
			return PCRs{}, err
		}
	}
	return Measure(img), nil
}

func sectionHeader(s section) []byte {
	h := make([]byte, SectionHeaderSize)
	binary.BigEndian.PutUint16(h, uint16(s.typ))
	binary.BigEndian.PutUint64(h[4:], uint64(len(s.data)))
	return h
}

func orDefault(v, def uint64) uint64 {
	if v == 0 {
		return def
	}
	return v
}

// validate refuses an image nitro-cli could not boot.
func (img *Image) validate() error {
	switch {
	case len(img.Kernel) == 0:
		return errors.New("eif: no kernel")
	case len(img.Ramdisks) == 0:
		return errors.New("eif: no ramdisk: the first boots the enclave (init and the Nitro Secure Module driver)")
	case len(img.sections()) > MaxSections:
		return fmt.Errorf("eif: %d ramdisks, at most %d", len(img.Ramdisks), MaxSections-4)
	case img.MemoryMiB > 1<<40 || img.CPUs > 1<<16:
		return fmt.Errorf("eif: %d MiB and %d CPUs by default: out of range", img.MemoryMiB, img.CPUs)
	case bytes.IndexByte([]byte(img.Cmdline), 0) >= 0:
		return errors.New("eif: the command line holds a NUL")
	}
	return nil
}
