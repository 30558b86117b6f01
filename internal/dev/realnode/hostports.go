package realnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoNft says what to install.
var ErrNoNft = errors.New("nft is not installed: the real node's hostPorts (LAS at the node's address, port 18766) are nftables rules the CNI portmap plugin makes with it (apt-get install nftables)")

// HostTools checks that the host has the distribution's tools a real node
// runs: runc and nft.
func HostTools() error {
	if _, err := Runc(); err != nil {
		return err
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return ErrNoNft
	}
	return nil
}

// hostPortTables are the nftables tables the portmap plugin keeps
// hostPort rules in (its nftables backend's name, in both families).
var hostPortTables = [][2]string{{"ip", "cni_hostport"}, {"ip6", "cni_hostport"}}

// recordHostPortTables writes to file which of the portmap plugin's tables
// do not exist yet, unless file exists: those are the node's to remove.
func recordHostPortTables(file string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	var missing []string
	for _, t := range hostPortTables {
		if exec.Command("nft", "list", "table", t[0], t[1]).Run() != nil {
			missing = append(missing, t[0]+" "+t[1])
		}
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	return os.WriteFile(file, []byte(strings.Join(missing, "\n")), 0o600)
}

// removeHostPortTables deletes the tables recordHostPortTables found
// missing: the rules of pods killed without a CNI DEL go with them. A table
// that existed before is someone else's and stays.
func removeHostPortTables(file string) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(string(data), "\n") {
		family, table, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if exec.Command("nft", "list", "table", family, table).Run() != nil {
			continue // never made, or gone
		}
		if out, err := exec.Command("nft", "delete", "table", family, table).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("removing nftables table %s %s: %w: %s", family, table, err, out))
		}
	}
	return errors.Join(errs...)
}
