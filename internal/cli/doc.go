// Package cli builds the gpuctk command line from the packages that do the
// work: one file per command group (cdi, mps, runtime), each adding its
// commands to the app. Only this package and cmd/ print; the packages it
// calls return errors.
package cli
