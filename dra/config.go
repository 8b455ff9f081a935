package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpuctk/gpuctk/config"
)

// The apiVersion and kind of the per-claim configuration a ResourceClaim
// (or a DeviceClass) passes to the driver as opaque parameters.
const (
	APIVersion = "gpu.gpuctk.io/v1alpha1"
	Kind       = "GpuConfig"
)

// Config is the opaque configuration of a claim's devices:
//
//	apiVersion: gpu.gpuctk.io/v1alpha1
//	kind: GpuConfig
//	sharing:
//	  strategy: mps            # or time-slicing
//	  mps:
//	    activeThreadPercentage: 50
//	    pinnedMemoryLimit: 10GiB
type Config struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Sharing    *Sharing `json:"sharing,omitempty"`
}

// Sharing is how the containers and pods of a claim share its devices.
type Sharing struct {
	// Strategy is config.TimeSlicing or config.MPS.
	Strategy string `json:"strategy"`
	// MPS sets the MPS clients' limits; for the mps strategy only.
	MPS *MPS `json:"mps,omitempty"`
}

// MPS are an MPS client's limits; zero leaves the device's own.
type MPS struct {
	ActiveThreadPercentage int         `json:"activeThreadPercentage,omitempty"`
	PinnedMemoryLimit      config.Size `json:"pinnedMemoryLimit,omitempty"`
}

// DecodeConfig decodes opaque parameters strictly: an unknown field, a
// wrong apiVersion or kind and every invalid value is an error, all of
// them joined, each saying what to write instead.
func DecodeConfig(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", Kind, decodeError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: data after the object: pass one JSON or YAML object", Kind)
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(Kind+": "+format, args...)) }
	if c.APIVersion != APIVersion {
		fail("apiVersion is %q: set %q", c.APIVersion, APIVersion)
	}
	if c.Kind != Kind {
		fail("kind is %q: set %q", c.Kind, Kind)
	}
	if s := c.Sharing; s != nil {
		switch s.Strategy {
		case config.TimeSlicing:
			if s.MPS != nil {
				fail("sharing.mps is set but sharing.strategy is %q: set strategy %q or remove mps", s.Strategy, config.MPS)
			}
		case config.MPS:
		default:
			fail("sharing.strategy is %q: use %q or %q", s.Strategy, config.TimeSlicing, config.MPS)
		}
		if m := s.MPS; m != nil && (m.ActiveThreadPercentage < 0 || m.ActiveThreadPercentage > 100) {
			fail("sharing.mps.activeThreadPercentage is %d: it must be from 1 to 100", m.ActiveThreadPercentage)
		}
		if m := s.MPS; m != nil && m.PinnedMemoryLimit != 0 && m.PinnedMemoryLimit < 1<<20 {
			fail("sharing.mps.pinnedMemoryLimit is %d bytes: it must be at least 1MiB", uint64(m.PinnedMemoryLimit))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &c, nil
}

// decodeError words a JSON error for a user who wrote YAML: the field and
// what it should be, without Go's type names.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		want := map[string]string{"string": "a string", "int": "a whole number", "Size": "a size such as 10GiB"}[te.Type.Name()]
		if want == "" {
			want = "an object"
		}
		return fmt.Errorf("%s is %s: it must be %s", te.Field, te.Value, want)
	case errors.As(err, &se):
		return fmt.Errorf("not valid JSON at byte %d: %w", se.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("unknown field %s: the fields are apiVersion, kind, sharing.strategy, sharing.mps.activeThreadPercentage and sharing.mps.pinnedMemoryLimit",
			strings.TrimPrefix(err.Error(), "json: unknown field "))
	case strings.HasPrefix(err.Error(), "size "):
		return fmt.Errorf("sharing.mps.pinnedMemoryLimit: %w", err) // the one Size field
	case errors.Is(err, io.EOF):
		return errors.New("no parameters: pass an object with apiVersion and kind")
	}
	return err
}
