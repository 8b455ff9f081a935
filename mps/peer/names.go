package peer

// What an MPS replica's edits put in a container, which gpuctk writes
// into the spec and gpuctk-hook reads back from config.json.
const (
	// ContainerPipeDir is where a replica's client finds its daemon's
	// pipe folder.
	ContainerPipeDir = "/tmp/nvidia-mps"
	// HookCommand is the gpuctk-hook subcommand that checks a daemon
	// answers.
	HookCommand = "mps-check"
)
