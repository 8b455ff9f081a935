package nvmlhost

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
)

// noInstance is the GPU/compute instance id of an event about a whole GPU.
const noInstance = 0xFFFFFFFF

// WatchXIDs reports the critical-error (XID) events of every GPU, as NVML
// delivers them, until ctx ends; then it closes the channel and releases
// NVML. GPUs that cannot report XIDs are skipped; none at all is an error.
func (n *Source) WatchXIDs(ctx context.Context) (<-chan inventory.XIDEvent, error) {
	if ret := n.lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: %w", ret)
	}
	set, err := n.register()
	if err != nil {
		n.lib.Shutdown()
		return nil, err
	}
	out := make(chan inventory.XIDEvent)
	go func() {
		defer n.lib.Shutdown()
		defer set.Free()
		defer close(out)
		for ctx.Err() == nil {
			// A short wait so that ctx's end is seen within a second.
			data, ret := set.Wait(1000)
			if errors.Is(ret, nvml.ERROR_TIMEOUT) {
				continue
			}
			if ret != nvml.SUCCESS || data.EventType&nvml.EventTypeXidCriticalError == 0 {
				time.Sleep(100 * time.Millisecond) // GPU lost, driver gone: do not spin
				continue
			}
			uuid, ret := data.Device.GetUUID()
			if ret != nvml.SUCCESS {
				continue
			}
			ev := inventory.XIDEvent{GPU: uuid, GI: -1, CI: -1, XID: data.EventData}
			if data.GpuInstanceId != noInstance {
				ev.GI = int(data.GpuInstanceId)
				if data.ComputeInstanceId != noInstance {
					ev.CI = int(data.ComputeInstanceId)
				}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
			}
		}
	}()
	return out, nil
}

// register makes an event set with every GPU that reports XIDs.
func (n *Source) register() (nvml.EventSet, error) {
	set, ret := n.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: event set: %w", ret)
	}
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		set.Free()
		return nil, fmt.Errorf("NVML: GPU count: %w", ret)
	}
	registered := 0
	for i := range count {
		dev, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		types, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret == nvml.SUCCESS {
			registered++
		}
	}
	if registered == 0 {
		set.Free()
		return nil, fmt.Errorf("NVML: no GPU reports XID events")
	}
	return set, nil
}

// WatchXIDs reports the XID events of the GPUs of the NVML library found
// under driverRoot (see Source.WatchXIDs).
func WatchXIDs(ctx context.Context, driverRoot string, opts ...driver.Option) (<-chan inventory.XIDEvent, error) {
	lib, err := driver.FindLibrary(driverRoot, "libnvidia-ml.so.1", opts...)
	if err != nil {
		return nil, err
	}
	src, err := Open(lib)
	if err != nil {
		return nil, err
	}
	return src.WatchXIDs(ctx)
}
