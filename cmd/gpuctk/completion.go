package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// Shell completion asks gpuctk itself: with --generate-bash-completion
// after the words typed so far, it prints the commands and flags that can
// come next (urfave/cli's protocol), so the scripts stay the same as
// commands are added.
const bashCompletion = `# bash completion for gpuctk: source it, or put it in
# /usr/share/bash-completion/completions/gpuctk
_gpuctk() {
	local cur=${COMP_WORDS[COMP_CWORD]}
	local words=("${COMP_WORDS[@]:0:COMP_CWORD}")
	local opts
	if [[ $cur == -* ]]; then
		opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
	else
		opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
	fi
	COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -o bashdefault -o default -F _gpuctk gpuctk
`

const zshCompletion = `#compdef gpuctk
# zsh completion for gpuctk: put it in a folder of $fpath as _gpuctk
_gpuctk() {
	local -a opts
	local cur=${words[CURRENT]}
	if [[ $cur == -* ]]; then
		opts=("${(@f)$(${words[@]:0:CURRENT-1} $cur --generate-bash-completion 2>/dev/null)}")
	else
		opts=("${(@f)$(${words[@]:0:CURRENT-1} --generate-bash-completion 2>/dev/null)}")
	fi
	_describe 'values' opts
}
compdef _gpuctk gpuctk
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script for bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: "bash: gpuctk completion bash > /usr/share/bash-completion/completions/gpuctk\n" +
			"zsh:  gpuctk completion zsh > \"${fpath[1]}/_gpuctk\"\n" +
			"fish: gpuctk completion fish > ~/.config/fish/completions/gpuctk.fish",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return &usageError{cmd: c.Command.HelpName, err: fmt.Errorf("want one shell (bash, zsh or fish), got %d arguments", c.NArg())}
			}
			var script string
			switch shell := c.Args().First(); shell {
			case "bash":
				script = bashCompletion
			case "zsh":
				script = zshCompletion
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				script = s
			default:
				return &usageError{cmd: c.Command.HelpName, err: fmt.Errorf("shell %q is not known: use bash, zsh or fish", shell)}
			}
			_, err := fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}

// manCommand prints gpuctk's man page (roff), for make man.
func manCommand() *cli.Command {
	return &cli.Command{
		Name:   "man",
		Usage:  "print the gpuctk(8) man page",
		Hidden: true,
		Action: func(c *cli.Context) error {
			page, err := c.App.ToManWithSection(8)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(c.App.Writer, page)
			return err
		},
	}
}
