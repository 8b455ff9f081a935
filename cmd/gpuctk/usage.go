package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// usageError is a mistake in how gpuctk was called (an unknown flag or
// command, an argument too many): exit status 2, with usage on stderr and
// nothing on stdout, so a redirect never leaves a broken file.
type usageError struct {
	cmd string // "gpuctk cdi generate"
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// strict makes app report every usage mistake as a *usageError: unknown
// flags, unknown commands (with the closest one suggested) and arguments
// given to commands that take none.
func strict(app *cli.App) {
	onUsage := func(c *cli.Context, err error, _ bool) error {
		flags := c.App.Flags
		if c.Command != nil {
			flags = c.Command.Flags
		}
		const undefined = "flag provided but not defined: -"
		if name, ok := strings.CutPrefix(err.Error(), undefined); ok && cli.SuggestFlag != nil {
			if s := cli.SuggestFlag(flags, strings.TrimLeft(name, "-"), false); s != "" {
				err = fmt.Errorf("unknown flag %q: did you mean %s?", strings.TrimLeft(name, "-"), s)
			}
		}
		return &usageError{cmd: c.Command.HelpName, err: err}
	}
	var notFound error
	app.OnUsageError = onUsage
	app.Suggest = true
	app.ExitErrHandler = func(*cli.Context, error) {} // main decides the exit status
	app.CommandNotFound = func(c *cli.Context, name string) {
		cmds, where := c.App.Commands, c.App.Name
		if c.Command != nil && c.Command.Name != "" {
			cmds, where = c.Command.Subcommands, c.Command.HelpName
		}
		msg := fmt.Sprintf("%q is not a command of %s", name, where)
		if cli.SuggestCommand != nil {
			if s := cli.SuggestCommand(cmds, name); s != "" {
				msg += ": " + strings.TrimSuffix(strings.ToLower(s[:1])+s[1:], "?") + "?"
			}
		}
		notFound = &usageError{cmd: where, err: errors.New(msg)}
	}
	var walk func(cmds []*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			cmd.OnUsageError = onUsage
			if cmd.Action != nil {
				// --quiet and --debug go before or after the command.
				cmd.Flags = append(cmd.Flags, logFlags()...)
				cmd.Before = quietBefore
			}
			// A missing required flag is a usage mistake too: cli would
			// print the whole help on stdout and exit 1.
			required := requiredFlags(cmd.Flags)
			if cmd.Action != nil && (cmd.ArgsUsage == "" || len(required) > 0) {
				action, takesArgs := cmd.Action, cmd.ArgsUsage != ""
				cmd.Action = func(c *cli.Context) error {
					if c.NArg() > 0 && !takesArgs {
						return &usageError{cmd: c.Command.HelpName, err: fmt.Errorf("unexpected argument %q", c.Args().First())}
					}
					for _, f := range required {
						if !c.IsSet(f.Names()[0]) {
							return &usageError{cmd: c.Command.HelpName, err: fmt.Errorf("--%s is missing: %s", f.Names()[0], f.GetUsage())}
						}
					}
					return action(c)
				}
			}
			walk(cmd.Subcommands)
		}
	}
	walk(app.Commands)
	// CommandNotFound cannot return an error: hand it to Run's caller.
	app.After = func(*cli.Context) error { return notFound }
}

// requiredFlags takes the required mark off flags, for the command's
// action to check them, and returns the flags it was on.
func requiredFlags(flags []cli.Flag) []cli.DocGenerationFlag {
	var req []cli.DocGenerationFlag
	for _, f := range flags {
		switch f := f.(type) {
		case *cli.StringFlag:
			if f.Required {
				f.Required = false
				req = append(req, f)
			}
		case *cli.StringSliceFlag:
			if f.Required {
				f.Required = false
				req = append(req, f)
			}
		}
	}
	return req
}

// report prints err to stderr the way its kind asks and returns the exit
// status: 2 for usage mistakes (with where to find the usage), 1 otherwise.
func report(stderr io.Writer, err error) int {
	var u *usageError
	if errors.As(err, &u) {
		fmt.Fprintf(stderr, "gpuctk: %v\nRun '%s --help' for usage.\n", u.err, u.cmd)
		return 2
	}
	fmt.Fprintln(stderr, "gpuctk:", err)
	var x *exitError
	if errors.As(err, &x) {
		return x.code
	}
	return 1
}

// exitError is an error that exits with its own status, not 1.
type exitError struct {
	err  error
	code int
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// logFlags are the flags every command takes: on the app, before the
// command, and on each command, after it.
func logFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, EnvVars: envVar("quiet"), Usage: "print errors only: no summaries, notes or warnings on stderr"},
		&cli.BoolFlag{Name: "debug", EnvVars: envVar("debug"), Usage: "say on stderr where the configuration, the host and the driver's files come from"},
	}
}

// quietBefore silences what gpuctk says beside its output under --quiet;
// errors are printed by main, to os.Stderr, either way.
func quietBefore(c *cli.Context) error {
	if flagOn(c, "quiet") {
		c.App.ErrWriter = io.Discard
	}
	return nil
}

// flagOn reports whether a log flag is on, given before the command (the
// app's) or after it (the command's own).
func flagOn(c *cli.Context, name string) bool {
	for _, ctx := range c.Lineage() {
		if ctx.Bool(name) {
			return true
		}
	}
	return false
}
