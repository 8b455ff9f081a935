// Package config reads gpuctk's configuration file, /etc/gpuctk/config.toml
// by default: spec generation settings, which devices are shared and how,
// MPS daemon settings and the runtime wrapper's settings.
//
// Parsing is strict: an unknown key, a value of the wrong type or a sharing
// entry that breaks a rule is an error naming the file, the entry and the
// rule. Rules that need to know the host's devices (a selector that matches
// nothing, two entries claiming one device) are checked where the host is
// known, by package cdi.
package config
