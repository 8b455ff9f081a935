// Package jsonobj edits JSON objects member by member without disturbing
// the rest of the document: Parse splits an object into its members, each
// kept as the bytes it was read as and in its place; Set, Delete and Bytes
// change only what the caller changes. gpuctk-runtime uses it on a
// container's config.json and `gpuctk runtime configure` on docker's
// daemon.json, so members newer than the structs gpuctk is built with
// survive byte for byte.
//
// It also refuses documents that two readers could read differently. Go's
// encoding/json, and so runc and dockerd, take the last of two members with
// the same name, and match struct fields case-insensitively, so
// {"process":…,"Process":…} means the second object to runc whatever
// gpuctk read. Parse and CheckKeys refuse a repeated key, and in Fold mode
// keys that encoding/json would take for the same field.
package jsonobj
