package service

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// contradiction reports the first field where live contradicts desired, or
// "" if live carries every value desired sets. Fields only live has (set by
// the API server, admission, other controllers) are fine; lists must have
// the desired length and match element by element. Numbers and strings of
// the same value are equal, as YAML manifests and the API disagree on
// quantities like `sgx.cloister.dev/enclave: 1`.
func contradiction(desired, live any, path string) string {
	switch d := desired.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return orRoot(path)
		}
		for _, k := range slices.Sorted(maps.Keys(d)) {
			dv := d[k]
			lv, ok := l[k]
			if !ok {
				if isEmpty(dv) {
					continue // `resources: {}` is the same as no resources
				}
				return path + "." + k
			}
			if p := contradiction(dv, lv, path+"."+k); p != "" {
				return p
			}
		}
		return ""
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(d) {
			if !ok && len(d) == 0 && live == nil {
				return ""
			}
			return orRoot(path)
		}
		for i := range d {
			if p := contradiction(d[i], l[i], fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
		return ""
	case nil:
		return ""
	default:
		if scalar(desired) != scalar(live) {
			return orRoot(path)
		}
		return ""
	}
}

func orRoot(path string) string {
	if path == "" {
		return "."
	}
	return path
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	default:
		return fmt.Sprint(x)
	}
}
