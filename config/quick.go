package config

import (
	"strconv"

	"github.com/pelletier/go-toml/v2/unstable"
)

// decodeQuick decodes the plain files gpuctk's configuration is written
// as, without reflection: gpuctk-runtime reads the file at every container
// start, and in a fresh process go-toml's decoding into Config spends 80 µs
// building its plans of the types (3 µs for walking the document). It
// walks go-toml's own parser's expressions and takes only what it can map
// with no doubt: a [section] or [[sharing]] header, then keys of one part
// with a string, integer, boolean or array-of-strings value of the field's
// type, each once. Anything else (an unknown or repeated key, a dotted
// key, an inline table, a value of another type, an integer written other
// than in plain decimal) gives ok false, and Parse decodes the file with
// go-toml's decoder, which accepts it the same way or words the error.
// FuzzDecodeQuick holds the two to the same result.
func decodeQuick(data []byte) (c Config, ok bool) {
	var p unstable.Parser
	p.Reset(data)
	section := ""
	// The tables and the keys of each table so far: go-toml refuses
	// either twice. A key of the n-th [[sharing]] is "sharing<n>.key".
	seen := map[string]bool{}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			name, ok := simpleKey(e)
			if !ok {
				return c, false
			}
			if e.Kind == unstable.ArrayTable {
				if name != "sharing" {
					return c, false
				}
				c.Sharing = append(c.Sharing, Sharing{})
			} else {
				switch name {
				case "cdi", "mps", "runtime", "kubernetes", "mig", "dra":
				default:
					return c, false
				}
				if seen["["+name] {
					return c, false
				}
				seen["["+name] = true
			}
			section = name
		case unstable.KeyValue:
			key, ok := simpleKey(e)
			where := section
			if section == "sharing" {
				where += strconv.Itoa(len(c.Sharing))
			}
			if !ok || seen[where+"."+key] {
				return c, false
			}
			seen[where+"."+key] = true
			v := e.Value()
			switch section {
			case "cdi":
				ok = c.CDI.setQuick(key, v)
			case "mps":
				ok = c.MPS.setQuick(key, v)
			case "runtime":
				ok = c.Runtime.setQuick(key, v)
			case "kubernetes":
				ok = c.Kubernetes.setQuick(key, v)
			case "mig":
				ok = c.MIG.setQuick(key, v)
			case "dra":
				ok = key == "driver-name" && quickString(v, &c.DRA.DriverName)
			case "sharing":
				ok = c.Sharing[len(c.Sharing)-1].setQuick(key, v)
			default:
				ok = false
			}
			if !ok {
				return c, false
			}
		default:
			return c, false
		}
	}
	return c, p.Error() == nil
}

// simpleKey returns the key of a key-value or table header of one part.
func simpleKey(e *unstable.Node) (string, bool) {
	it := e.Key()
	if !it.Next() {
		return "", false
	}
	k := it.Node()
	if it.Next() {
		return "", false
	}
	return string(k.Data), true
}

func (d *CDI) setQuick(key string, v *unstable.Node) bool {
	switch key {
	case "vendor":
		return quickString(v, &d.Vendor)
	case "class":
		return quickString(v, &d.Class)
	case "hook-path":
		return quickString(v, &d.HookPath)
	case "driver-root":
		return quickString(v, &d.DriverRoot)
	case "dev-root":
		return quickString(v, &d.DevRoot)
	case "host-driver-root":
		return quickString(v, &d.HostDriverRoot)
	case "spec-dirs":
		return quickStrings(v, &d.SpecDirs)
	case "library-search-paths":
		return quickStrings(v, &d.LibrarySearchPaths)
	case "replica-names":
		return quickStrings(v, &d.ReplicaNames)
	case "device-names":
		return quickStrings(v, &d.DeviceNames)
	case "cuda-compat":
		return quickBoolPtr(v, &d.CUDACompat)
	case "disable-device-node-modification":
		return quickBoolPtr(v, &d.DisableDeviceNodeModification)
	case "driver-folder":
		return quickBoolPtr(v, &d.DriverFolder)
	case "driver-store":
		return quickString(v, &d.DriverStore)
	}
	return false
}

func (s *Sharing) setQuick(key string, v *unstable.Node) bool {
	switch key {
	case "devices":
		return quickStrings(v, &s.Devices)
	case "strategy":
		return quickString(v, &s.Strategy)
	case "replicas":
		return quickInt(v, &s.Replicas)
	case "active-thread-percentage":
		return quickInt(v, &s.ActiveThreadPercentage)
	case "pinned-memory-limit":
		return quickSize(v, &s.PinnedMemoryLimit)
	case "resource":
		return quickString(v, &s.Resource)
	case "fail-requests-greater-than-one":
		return quickBoolPtr(v, &s.FailRequestsGreaterThanOne)
	}
	return false
}

func (m *MPSConfig) setQuick(key string, v *unstable.Node) bool {
	switch key {
	case "state-root":
		return quickString(v, &m.StateRoot)
	case "shm-size":
		return quickSize(v, &m.ShmSize)
	case "pipe-size":
		return quickSize(v, &m.PipeSize)
	case "set-compute-mode":
		return quickBoolPtr(v, &m.SetComputeMode)
	case "start-timeout":
		return quickString(v, &m.StartTimeout)
	}
	return false
}

func (r *Runtime) setQuick(key string, v *unstable.Node) bool {
	switch key {
	case "runtimes":
		return quickStrings(v, &r.Runtimes)
	case "log-file":
		return quickString(v, &r.LogFile)
	case "cache-dir":
		return quickString(v, &r.CacheDir)
	case "accept-visible-devices-env":
		return quickBoolPtr(v, &r.AcceptVisibleDevicesEnv)
	}
	return false
}

func (k *Kubernetes) setQuick(key string, v *unstable.Node) bool {
	switch key {
	case "mig-strategy":
		return quickString(v, &k.MIGStrategy)
	case "device-list-strategy":
		return quickStrings(v, &k.DeviceListStrategy)
	case "allocation-policy":
		return quickString(v, &k.AllocationPolicy)
	case "rename-shared":
		return quickBool(v, &k.RenameShared)
	case "driver-capabilities":
		return quickStrings(v, &k.DriverCapabilities)
	}
	return false
}

func (m *MIGConfig) setQuick(key string, v *unstable.Node) bool {
	switch key {
	case "config":
		return quickString(v, &m.Config)
	case "config-file":
		return quickString(v, &m.ConfigFile)
	}
	return false
}

func quickString(v *unstable.Node, dst *string) bool {
	if v.Kind != unstable.String {
		return false
	}
	*dst = string(v.Data)
	return true
}

// quickStrings sets an array of strings; an empty array is an empty list,
// not none, as go-toml decodes it (and as [cdi] replica-names tells apart).
func quickStrings(v *unstable.Node, dst *[]string) bool {
	if v.Kind != unstable.Array {
		return false
	}
	list := []string{}
	for it := v.Children(); it.Next(); {
		var s string
		if !quickString(it.Node(), &s) {
			return false
		}
		list = append(list, s)
	}
	*dst = list
	return true
}

func quickBool(v *unstable.Node, dst *bool) bool {
	if v.Kind != unstable.Bool {
		return false
	}
	*dst = string(v.Data) == "true"
	return true
}

func quickBoolPtr(v *unstable.Node, dst **bool) bool {
	var b bool
	if !quickBool(v, &b) {
		return false
	}
	*dst = &b
	return true
}

// quickUint reads an integer written as plain decimal digits, without a
// sign, underscores or a leading zero.
func quickUint(v *unstable.Node) (uint64, bool) {
	d := v.Data
	if v.Kind != unstable.Integer || len(d) == 0 || (d[0] == '0' && len(d) > 1) {
		return 0, false
	}
	for _, b := range d {
		if b < '0' || b > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(string(d), 10, 63)
	return n, err == nil
}

func quickInt(v *unstable.Node, dst *int) bool {
	n, ok := quickUint(v)
	if ok {
		*dst = int(n)
	}
	return ok
}

// quickSize sets a Size written as a string with a unit or as an integer
// of bytes.
func quickSize(v *unstable.Node, dst *Size) bool {
	if v.Kind == unstable.String {
		s, err := ParseSize(string(v.Data))
		if err != nil {
			return false
		}
		*dst = s
		return true
	}
	n, ok := quickUint(v)
	if ok {
		*dst = Size(n)
	}
	return ok
}
