// Package elfarch says which Go architecture an executable was built
// for, from its ELF header: what refuses a binary of another machine
// where one platform's files are put together (images, enclave images).
package elfarch

import (
	"bytes"
	"debug/elf"
	"fmt"
)

// machines are the ELF machines of Go's architectures.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "s390x": elf.EM_S390, "386": elf.EM_386, "ppc64le": elf.EM_PPC64, "riscv64": elf.EM_RISCV,
}

// Check refuses data unless it is an ELF executable for goarch; name
// says which file in the error.
func Check(name string, data []byte, goarch string) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s is no ELF executable for %s: %w", name, goarch, err)
	}
	if want, ok := machines[goarch]; !ok || f.Machine != want {
		return fmt.Errorf("%s is built for %s, not for %s: build it again with GOARCH=%s", name, f.Machine, goarch, goarch)
	}
	return nil
}
