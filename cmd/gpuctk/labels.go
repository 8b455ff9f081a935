package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/labels"
)

func labelsCommand() *cli.Command {
	return &cli.Command{
		Name:  "labels",
		Usage: "print the node labels of this host, as NVIDIA's GPU feature discovery names them",
		Description: "Prints nvidia.com/ labels (gpu.count, gpu.product, mig.strategy, ...) as key=value\n" +
			"lines. With --output DIR, writes them as the Node Feature Discovery local feature\n" +
			"file DIR/" + labels.FeatureFile + " instead (DIR is usually\n" +
			"/etc/kubernetes/node-feature-discovery/features.d; NFD must allow the nvidia.com\n" +
			"label namespace). Sharing and MIG labels follow config [kubernetes] and [[sharing]].",
		Flags: append(hostFlags(),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, EnvVars: envVar("output"), Usage: "write the NFD feature file into `DIR`"},
		),
		Action: printLabels,
	}
}

func printLabels(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", c.Args().First())
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	set, _, err := resolve(c, cfg)
	if err != nil {
		return err
	}
	warnResolution(c, set)
	for _, n := range set.Notes {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: warning:", n)
	}
	l, err := labels.For(set, cfg.Kubernetes)
	if err != nil {
		return err
	}
	if dir := c.String("output"); dir != "" {
		p, err := l.Write(dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: wrote %d labels to %s\n", len(l), p)
		return nil
	}
	_, err = c.App.Writer.Write(l.Lines())
	return err
}
