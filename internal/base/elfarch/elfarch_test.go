package elfarch

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check("this test", data, runtime.GOARCH); err != nil {
		t.Error(err)
	}
	other := map[bool]string{true: "amd64", false: "s390x"}[runtime.GOARCH == "s390x"]
	if err := Check("this test", data, other); err == nil || !strings.Contains(err.Error(), "not for "+other+": build it again with GOARCH="+other) {
		t.Errorf("as %s: %v", other, err)
	}
	if err := Check("a script", []byte("#!/bin/sh\n"), runtime.GOARCH); err == nil || !strings.Contains(err.Error(), "a script is no ELF executable") {
		t.Errorf("a script: %v", err)
	}
	if err := Check("this test", data, "mips"); err == nil {
		t.Error("an architecture without a machine")
	}
}
