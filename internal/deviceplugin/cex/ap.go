// Package cex is the device plugin mode for IBM CryptoExpress adapters on
// IBM Z and LinuxONE. It offers the node's APQNs (adjunct
// processor queues: an adapter and a domain) of one adapter mode as
// ibm.com/cex-<mode>, or one resource per crypto config set, and gives
// each container a zcrypt device node restricted to its APQN as
// /dev/z90crypt. Unlike IBM's plugin it removes the zcrypt nodes no
// container uses any more, and notices hot plugs from filesystem events
// instead of a 30-second poll.
package cex

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Type is an adapter mode: CEX<n>P cards are ep11, CEX<n>C cca and
// CEX<n>A accelerators.
type Type string

// The adapter modes.
const (
	EP11  Type = "ep11"
	CCA   Type = "cca"
	Accel Type = "accel"
)

// ParseType accepts ep11, cca or accel.
func ParseType(s string) (Type, error) {
	switch t := Type(strings.ToLower(strings.TrimSpace(s))); t {
	case EP11, CCA, Accel:
		return t, nil
	}
	return "", fmt.Errorf("unknown CEX type %q: use ep11, cca or accel (-t, --cex-type or $CEXTYPE)", s)
}

// APQN names one queue.
type APQN struct {
	Adapter int `json:"adapter"`
	Domain  int `json:"domain"`
}

// String is the sysfs spelling, as lszcrypt prints it: 05.0012.
func (a APQN) String() string { return fmt.Sprintf("%02x.%04x", a.Adapter, a.Domain) }

// Queue is an APQN as the AP bus shows it.
type Queue struct {
	APQN
	Gen    string // cex8
	Type   Type
	Online bool // card and queue online
}

var (
	cardDir   = regexp.MustCompile(`^card([0-9a-f]{2})$`)
	queueDir  = regexp.MustCompile(`^([0-9a-f]{2})\.([0-9a-f]{4})$`)
	cardModel = regexp.MustCompile(`^CEX(\d+)([ACP])$`)
)

// apDir is where the AP bus lists its devices.
func apDir(sysRoot string) string { return filepath.Join(sysRoot, "devices", "ap") }

// ScanAP lists every queue of every CryptoExpress card under
// <sysRoot>/devices/ap. A system without the AP bus has none. Cards of
// other types (or half-created by a hot plug) are skipped.
func ScanAP(sysRoot string) ([]Queue, error) {
	entries, err := os.ReadDir(apDir(sysRoot))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the AP bus: %w", err)
	}
	var queues []Queue
	for _, e := range entries {
		if !cardDir.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(apDir(sysRoot), e.Name())
		m := cardModel.FindStringSubmatch(readLine(filepath.Join(dir, "type")))
		if m == nil {
			continue
		}
		typ := map[string]Type{"A": Accel, "C": CCA, "P": EP11}[m[2]]
		cardOnline := onlineFile(filepath.Join(dir, "online"))
		qs, err := os.ReadDir(dir)
		if err != nil {
			continue // unplugged while we looked
		}
		for _, q := range qs {
			qm := queueDir.FindStringSubmatch(q.Name())
			if qm == nil {
				continue
			}
			a, _ := strconv.ParseInt(qm[1], 16, 32)
			d, _ := strconv.ParseInt(qm[2], 16, 32)
			queues = append(queues, Queue{
				APQN:   APQN{Adapter: int(a), Domain: int(d)},
				Gen:    "cex" + m[1],
				Type:   typ,
				Online: cardOnline && onlineFile(filepath.Join(dir, q.Name(), "online")),
			})
		}
	}
	return queues, nil
}

// watchPaths are the AP bus directories whose entries change on hot plug
// and on/offlining.
func watchPaths(sysRoot string) []string {
	paths := []string{apDir(sysRoot)}
	entries, _ := os.ReadDir(apDir(sysRoot))
	for _, e := range entries {
		if !cardDir.MatchString(e.Name()) {
			continue
		}
		card := filepath.Join(apDir(sysRoot), e.Name())
		paths = append(paths, card)
		qs, _ := os.ReadDir(card)
		for _, q := range qs {
			if queueDir.MatchString(q.Name()) {
				paths = append(paths, filepath.Join(card, q.Name()))
			}
		}
	}
	return paths
}

func readLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// onlineFile reads an online attribute; a card without one is online.
func onlineFile(path string) bool {
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return true
	}
	return readLine(path) == "1"
}
