package cex

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
)

// Config is the crypto config sets file (JSON or YAML), in the shape of the
// CEXPlugin CR's spec.configSets. Unknown fields are errors: IBM's
// plugin's users lost settings to fields it silently ignored.
type Config struct {
	ConfigSets []ConfigSet `json:"configSets"`
}

// ConfigSet is a named group of APQNs offered as their own resource,
// ibm.com/cex-<type>-<name>, so that one project's pods get only its
// adapters and domains.
type ConfigSet struct {
	Name  string `json:"name"`
	APQNs []APQN `json:"apqns"`
	// MachineID limits the set to one machine (<manufacturer>-<type>-
	// <sequence code> from /proc/sysinfo); empty means every machine.
	MachineID string `json:"machineID,omitempty"`
}

// Limits of the AP architecture and of resource names.
const (
	MaxAdapter = 255
	MaxDomain  = 255
	// MaxSetName keeps ibm.com/cex-accel-<name> a valid resource name.
	MaxSetName = 63 - len("cex-accel-")
)

var setName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ParseConfig reads and validates a config sets document. Every problem is
// reported with where it is.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parsing config sets: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// LoadConfig reads the config sets file at path.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config sets (--config-sets): %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks names and that every APQN is in range and in one set
// only: an APQN in two sets would be handed to two projects.
func (c *Config) Validate() error {
	var errs []error
	names := map[string]bool{}
	owner := map[APQN]string{}
	for i, s := range c.ConfigSets {
		at := fmt.Sprintf("configSets[%d]", i)
		switch {
		case !setName.MatchString(s.Name) || len(s.Name) > MaxSetName:
			errs = append(errs, fmt.Errorf("%s.name %q: use lowercase letters, digits and '-', at most %d characters", at, s.Name, MaxSetName))
		case names[s.Name]:
			errs = append(errs, fmt.Errorf("%s.name %q: duplicate set name", at, s.Name))
		}
		names[s.Name] = true
		if len(s.APQNs) == 0 {
			errs = append(errs, fmt.Errorf("%s (%s).apqns: list at least one APQN", at, s.Name))
		}
		for j, a := range s.APQNs {
			where := fmt.Sprintf("%s (%s).apqns[%d]", at, s.Name, j)
			if a.Adapter < 0 || a.Adapter > MaxAdapter {
				errs = append(errs, fmt.Errorf("%s.adapter %d: out of range 0..%d", where, a.Adapter, MaxAdapter))
				continue
			}
			if a.Domain < 0 || a.Domain > MaxDomain {
				errs = append(errs, fmt.Errorf("%s.domain %d: out of range 0..%d", where, a.Domain, MaxDomain))
				continue
			}
			if prev, dup := owner[a]; dup {
				errs = append(errs, fmt.Errorf("%s: duplicate APQN %s (adapter %d, domain %d), already in set %q",
					where, a, a.Adapter, a.Domain, prev))
				continue
			}
			owner[a] = s.Name
		}
	}
	return errors.Join(errs...)
}

// configFile is a config sets file followed as it changes: a bad
// version is logged and the last good one kept. No path: no config sets.
type configFile struct {
	path string
	log  *slog.Logger
	cfg  *Config
	raw  []byte
}

// load reads the file the first time; its errors stop the plugin.
func (f *configFile) load() error {
	if f.path == "" {
		return nil
	}
	raw, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("reading config sets (--config-sets): %w", err)
	}
	c, err := ParseConfig(raw)
	if err != nil {
		return fmt.Errorf("config sets %s: %w", f.path, err)
	}
	f.cfg, f.raw = c, raw
	return nil
}

// reload picks up a changed file, keeping the last good configuration
// when the new one is bad.
func (f *configFile) reload() {
	if f.path == "" {
		return
	}
	raw, err := os.ReadFile(f.path)
	if err != nil {
		f.log.Warn("reading config sets; keeping the last good configuration", "path", f.path, "error", err)
		return
	}
	if bytes.Equal(raw, f.raw) {
		return
	}
	c, err := ParseConfig(raw)
	if err != nil {
		f.raw = raw // report a bad version once, not on every scan
		f.log.Error("config sets changed but are invalid; keeping the last good configuration", "path", f.path, "error", err)
		return
	}
	f.cfg, f.raw = c, raw
	f.log.Info("config sets reloaded", "path", f.path, "configSets", f.names())
}

func (f *configFile) names() []string {
	if f.cfg == nil {
		return nil
	}
	var n []string
	for _, s := range f.cfg.ConfigSets {
		n = append(n, s.Name)
	}
	return n
}

// machineID reads <manufacturer>-<type>-<sequence code> of this machine
// from /proc/sysinfo; empty when the file is absent (not s390).
func machineID(sysinfo string) string {
	b, err := os.ReadFile(sysinfo)
	if err != nil {
		return ""
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			if _, seen := fields[strings.TrimSpace(k)]; !seen {
				fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
	}
	if fields["Manufacturer"] == "" || fields["Type"] == "" {
		return ""
	}
	return fields["Manufacturer"] + "-" + fields["Type"] + "-" + fields["Sequence Code"]
}

// ConfigOf is the plugin's configuration file for spec's config sets; its
// Validate is what the plugin, the reconciler and the admission webhook
// all check.
func ConfigOf(spec *basev1beta1.CEXPluginSpec) *Config {
	cfg := &Config{}
	for _, s := range spec.ConfigSets {
		set := ConfigSet{Name: s.Name, MachineID: s.MachineID}
		for _, a := range s.APQNs {
			set.APQNs = append(set.APQNs, APQN{Adapter: int(a.Adapter), Domain: int(a.Domain)})
		}
		cfg.ConfigSets = append(cfg.ConfigSets, set)
	}
	return cfg
}
