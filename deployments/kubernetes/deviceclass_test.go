package kubernetes

import (
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuctk/gpuctk/dra"
)

// TestDeviceClasses: each DeviceClass selects the driver's devices of one
// type, by the attribute the driver publishes (package dra's Type), under
// the default driver name. (Evaluating the CEL would link the API
// server's CEL library into the module for this test alone.)
func TestDeviceClasses(t *testing.T) {
	for _, typ := range []string{dra.TypeGPU, dra.TypeMIG, dra.TypeReplica} {
		var dc resourceapi.DeviceClass
		decode(t, filepath.Join("dra", "deviceclass-"+typ+".yaml"), &dc)
		want := `device.driver == "` + dra.DefaultName + `" && device.attributes["` + dra.DefaultName + `"].type == "` + typ + `"`
		if dc.Name != typ+".gpuctk.io" || len(dc.Spec.Selectors) != 1 || dc.Spec.Selectors[0].CEL == nil || dc.Spec.Selectors[0].CEL.Expression != want {
			t.Errorf("DeviceClass %s: selectors %+v, want %s.gpuctk.io selecting %s", dc.Name, dc.Spec.Selectors, typ, want)
		}
	}
}
