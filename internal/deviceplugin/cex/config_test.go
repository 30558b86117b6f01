package cex

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/deviceplugin/cex/cexfake"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name, doc string
		errs      []string // substrings of the error; none: valid
	}{
		{"yaml", `
configSets:
- name: payments
  apqns: [{adapter: 5, domain: 18}, {adapter: 6, domain: 18}]
- name: ledger
  machineID: IBM-3931-0000000000012345
  apqns: [{adapter: 5, domain: 19}]
`, nil},
		{"json", `{"configSets":[{"name":"a","apqns":[{"adapter":0,"domain":255}]}]}`, nil},
		{"duplicate APQN across sets", `
configSets:
- {name: a, apqns: [{adapter: 5, domain: 18}]}
- {name: b, apqns: [{adapter: 5, domain: 18}]}
`, []string{"configSets[1] (b).apqns[0]: duplicate APQN 05.0012 (adapter 5, domain 18), already in set \"a\""}},
		{"domain out of range", `{configSets: [{name: a, apqns: [{adapter: 1, domain: 300}]}]}`,
			[]string{"configSets[0] (a).apqns[0].domain 300: out of range 0..255"}},
		{"adapter out of range", `{configSets: [{name: a, apqns: [{adapter: -1, domain: 3}]}]}`,
			[]string{"adapter -1: out of range 0..255"}},
		{"unknown field is not ignored", `{configSets: [{name: a, apqn: [{adapter: 1, domain: 3}]}]}`,
			[]string{`unknown field "apqn"`}},
		{"duplicate and bad names, empty set", `
configSets:
- {name: a, apqns: [{adapter: 1, domain: 1}]}
- {name: a, apqns: [{adapter: 1, domain: 2}]}
- {name: Payments, apqns: []}
`, []string{`configSets[1].name "a": duplicate set name`, `configSets[2].name "Payments": use lowercase`, "configSets[2] (Payments).apqns: list at least one APQN"}},
		{"not a document", `configSets: {`, []string{"parsing config sets"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.doc))
			if len(tt.errs) == 0 {
				if err != nil || len(c.ConfigSets) == 0 {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("invalid config accepted")
			}
			for _, want := range tt.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestMask(t *testing.T) {
	zeros := strings.Repeat("0", 64)
	for _, tc := range []struct {
		bits []int
		want string
	}{
		{nil, "0x" + zeros},
		{[]int{0}, "0x8" + zeros[1:]},
		{[]int{5}, "0x04" + zeros[2:]},
		{[]int{18}, "0x000020" + zeros[6:]},
		{[]int{255}, "0x" + zeros[1:] + "1"},
		{allBits(), "0x" + strings.Repeat("f", 64)},
	} {
		if got := Mask(tc.bits...); got != tc.want {
			t.Errorf("Mask(%v) = %s, want %s", tc.bits, got, tc.want)
		}
	}
}

func TestScanAP(t *testing.T) {
	k := cexfake.New(t)
	k.Card(0x05, "CEX8P", 0x12, 0x13)
	k.Card(0x0a, "CEX7C", 0x12)
	k.Card(0x0b, "CEX6A", 0x01)
	k.Card(0x0c, "CEX4S", 0x01) // not a mode this plugin knows
	k.SetOnline(0x05, 0x13, false)
	k.Mkdir("devices/ap/card05/not-a-queue")
	qs, err := ScanAP(k.Sys)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, q := range qs {
		got = append(got, q.String()+" "+q.Gen+" "+string(q.Type)+" "+map[bool]string{true: "online", false: "offline"}[q.Online])
	}
	want := []string{"05.0012 cex8 ep11 online", "05.0013 cex8 ep11 offline", "0a.0012 cex7 cca online", "0b.0001 cex6 accel online"}
	if !slices.Equal(got, want) {
		t.Errorf("ScanAP = %v\nwant %v", got, want)
	}
	// A card set offline takes its queues with it.
	k.Write("devices/ap/card0a/online", "0")
	qs, _ = ScanAP(k.Sys)
	for _, q := range qs {
		if q.Adapter == 0x0a && q.Online {
			t.Error("queue of an offline card reported online")
		}
	}
	if qs, err := ScanAP(t.TempDir()); err != nil || len(qs) != 0 {
		t.Errorf("no AP bus: %v %v", qs, err)
	}
}

func TestMachineID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sysinfo")
	if err := os.WriteFile(path, []byte("Manufacturer:         IBM\nType:                 3931\nModel:                701              A01\nSequence Code:        0000000000012345\nLPAR Name:            LP1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := machineID(path); got != "IBM-3931-0000000000012345" {
		t.Errorf("machineID = %q", got)
	}
	if got := machineID(filepath.Join(t.TempDir(), "none")); got != "" {
		t.Errorf("machineID without sysinfo = %q", got)
	}
}

func TestParseType(t *testing.T) {
	for in, want := range map[string]Type{"ep11": EP11, "CCA": CCA, " accel ": Accel} {
		if got, err := ParseType(in); err != nil || got != want {
			t.Errorf("ParseType(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseType("cex"); err == nil || !strings.Contains(err.Error(), "use ep11, cca or accel") {
		t.Errorf("ParseType(cex) = %v", err)
	}
}

// Whatever a config sets document holds, ParseConfig returns a valid
// configuration or an error naming where.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"configSets":[{"name":"a","apqns":[{"adapter":0,"domain":255}]}]}`))
	f.Add([]byte("configSets:\n- {name: a, apqns: [{adapter: 5, domain: 18}]}\n- {name: b, apqns: [{adapter: 5, domain: 18}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted %q, which does not validate: %v", data, err)
		}
	})
}
