package sgx

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cloister-cc/cloister/internal/base/tee"
)

// ResourceEPC is the node's EPC in bytes, published in the node's status
// (an extended resource: the kubelet's device plugin API counts devices,
// not bytes).
const ResourceEPC = tee.SGXEPC

// maxEPC bounds what sysfs may claim: 1 TiB per NUMA node is far beyond
// any SGX part.
const maxEPC = 1 << 40

// ReadEPC is the node's EPC: the sum of the kernel's per-NUMA-node
// sgx_total_bytes (Linux 5.17 and later, the same sections CPUID leaf
// 0x12 enumerates), under sysRoot. No such file: 0, no error (an older
// kernel, or no SGX).
func ReadEPC(sysRoot string) (int64, error) {
	files, err := filepath.Glob(filepath.Join(sysRoot, "devices", "system", "node", "node*", "x86", "sgx_total_bytes"))
	if err != nil {
		return 0, err
	}
	var total int64
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", f, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil || n < 0 || n > maxEPC {
			return 0, fmt.Errorf("%s: %q is not a size in bytes", f, strings.TrimSpace(string(raw)))
		}
		total += n
	}
	return total, nil
}
