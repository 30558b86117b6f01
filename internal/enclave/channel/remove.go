package channel

import (
	"fmt"
	"os"
)

// removeSocket removes a stale socket, and nothing else.
func removeSocket(path string) error {
	info, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if info.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s is no socket", path)
	}
	return os.Remove(path)
}
