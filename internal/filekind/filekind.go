// Package filekind names a file's type for messages: "a FIFO", "a
// folder", the words a user reads when a path is not the kind of file
// gpuctk expected there.
package filekind

import "io/fs"

// Name returns the type of a file of mode m, with its article.
func Name(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a folder"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a file of an unknown type"
}
