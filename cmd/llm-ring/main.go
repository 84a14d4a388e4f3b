// Command llm-ring is a cache-aware router for LLM replicas, with a simulated
// llama.cpp replica, a traffic generator, an experiment runner, an analysis,
// and a discrete-event simulator. Run "llm-ring help" for the subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand. run parses its own flags from args; ctx is
// cancelled on SIGINT or SIGTERM.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the one list of subcommands, in the order help shows them.
var commands = []command{
	{"demo", "run the whole study on simulated replicas and print the comparison", cmdDemo},
	{"router", "serve the cache-aware router (--config FILE)", cmdRouter},
	{"epp", "serve the router as a Gateway API endpoint picker (ext_proc gRPC; --config FILE)", cmdEPP},
	{"replica", "serve a simulated llama.cpp replica", cmdReplica},
	{"run", "replay traffic through the router under each policy and record every request", cmdRun},
	{"analyze", "summarise recorded runs: tables and charts", cmdAnalyze},
	{"sim", "run the study in virtual time (discrete-event simulator)", cmdSim},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code:
// 0 on success, 2 on a usage error, 1 on any other error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "llm-ring %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "llm-ring %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "llm-ring: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: llm-ring <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun \"llm-ring <command> -h\" for a command's flags.")
}

// usageError marks a command-line mistake (exit code 2).
type usageError struct{ error }

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("llm-ring "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and wraps a parse failure as a usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}
