package inventory

// XIDEvent is a critical-error event a GPU reported (an XID, the driver's
// error code, as in the kernel log's "NVRM: Xid" lines).
type XIDEvent struct {
	// GPU is the UUID of the GPU that reported it.
	GPU string
	// GI and CI are the GPU and compute instance ids of the MIG device it
	// concerns, -1 when it concerns the whole GPU.
	GI, CI int
	XID    uint64
}

// Critical reports whether the XID means the device, rather than one
// application, failed. As NVIDIA's device plugin does, 13 (graphics engine
// exception), 31 (GPU memory page fault), 43 (GPU stopped processing), 45
// (preemptive cleanup), 68 (video decoder exception) and 109 (context
// switch timeout) are a program's own faults, which the driver recovers
// from by ending that program; every other XID is critical.
func (e XIDEvent) Critical() bool {
	switch e.XID {
	case 13, 31, 43, 45, 68, 109:
		return false
	}
	return true
}

// Concerns reports whether the event is about device d: a whole-GPU event
// concerns every device of the GPU, a MIG device's event that MIG device
// and its GPU offered whole.
func (e XIDEvent) Concerns(d Device) bool {
	if e.GPU != d.GPU.UUID {
		return false
	}
	if e.GI < 0 || d.MIG == nil {
		return true
	}
	return d.MIG.GI == e.GI && (e.CI < 0 || d.MIG.CI == e.CI)
}
