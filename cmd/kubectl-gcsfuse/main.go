// Command kubectl-gcsfuse is a kubectl plugin (kubectl finds it on the PATH as
// "kubectl gcsfuse"). Its one subcommand, audit, tells before a migration from the GKE
// Cloud Storage FUSE CSI driver what this driver would do with each volume of a set of
// manifests or of a cluster: run it unchanged, run it with something mapped (and to what),
// or refuse it (and why). The verdicts come from the driver's own admission and
// NodePublishVolume code (pkg/audit), so the audit and the driver cannot disagree.
//
//	kubectl gcsfuse audit -f FILE|DIR|- [-f ...]
//	kubectl gcsfuse audit [--kubeconfig PATH] [--context NAME] [-n NAMESPACE]
//
// Exit status: 0 when nothing would be refused, 1 when anything would, 2 for a usage
// error or an input that cannot be read (a message on stderr names it).
//
// It runs where kubectl does, Linux and macOS (GOOS=darwin go build ./cmd/kubectl-gcsfuse):
// the packages it shares with the driver keep their Linux-only parts (the node plugin's
// file handling) behind build tags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/audit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
)

// Exit statuses.
const (
	exitOK      = 0
	exitRefused = 1
	exitError   = 2
)

// usage is the plugin's help text.
const usage = `Usage:
  kubectl gcsfuse audit -f FILE|DIR|- [-f ...] [SETTINGS]
  kubectl gcsfuse audit [--kubeconfig PATH] [--context NAME] [-n NAMESPACE] [SETTINGS]

Tells, for each Cloud Storage FUSE volume of the manifests (-f: files, directories walked
for *.yaml, *.yml and *.json, or - for stdin) or of the cluster (read only: pods, their
workloads, claims, PersistentVolumes and StorageClasses), whether the gcsfuse-csi driver
runs it unchanged, runs it with what the GKE driver's attributes, options and annotations
map to, or refuses it and why. Volumes of both driver names (gcsfuse.csi.storage and
gcsfuse.csi.storage.gke.io) are audited.

One line per finding: <Kind>/<namespace>/<name>[ volume <v>| pod]: <verdict>: <detail>,
verdict one of unchanged, mapped, refused, warning, note; then a summary line.

SETTINGS are the installed chart's, where they differ from its defaults and change a verdict:
  --shared-adc-namespaces NS[,NS...]  its mounter.adcNamespaces (names, prefix*, or *)
  --shared-federated                  its node.wifProvider or mounter.identityProvider is set
  --node-federated                    its node.wifProvider is set
Without them, shared volumes (mountMode: shared) with no identity of their own are refused,
as the default chart refuses them, and so are hostNetwork pods whose inline volumes ask
for their own account (hostNetworkPodKSA) without a provider.

Exit status: 0 nothing refused, 1 something refused, 2 usage or input error.
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the plugin with its arguments (after the program name) and streams; it returns
// the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitError
		}
		return exitOK
	}
	if args[0] != "audit" {
		fmt.Fprintf(stderr, "kubectl gcsfuse: unknown command %q (the one command is audit)\n\n%s", args[0], usage)
		return exitError
	}
	opts, err := parseAuditFlags(args[1:], stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "kubectl gcsfuse audit: %v\n", err)
		return exitError
	}
	inv := audit.NewInventory()
	if len(opts.files) > 0 {
		err = readManifests(inv, opts.files, stdin)
	} else {
		err = readCluster(ctx, inv, opts)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kubectl gcsfuse audit: %v\n", err)
		return exitError
	}
	rep, err := audit.Run(ctx, inv, opts.settings)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl gcsfuse audit: %v\n", err)
		return exitError
	}
	for _, f := range rep.Findings {
		fmt.Fprintln(stdout, f)
	}
	fmt.Fprintln(stdout, rep.Summary())
	if rep.Refused() {
		return exitRefused
	}
	return exitOK
}

// auditOptions are the audit's flags.
type auditOptions struct {
	files      []string
	kubeconfig string
	context    string
	namespace  string
	settings   audit.Options
}

// fileList is a repeatable -f.
type fileList []string

func (l *fileList) String() string { return strings.Join(*l, ",") }

func (l *fileList) Set(v string) error {
	if v == "" {
		return errors.New("empty file name")
	}
	*l = append(*l, v)
	return nil
}

// parseAuditFlags parses and checks the audit's flags: manifests (-f) and a cluster
// (--kubeconfig, --context, -n) are two different inputs, never mixed, and no argument is
// left over (a misplaced file name would otherwise be ignored silently).
func parseAuditFlags(args []string, stderr io.Writer) (auditOptions, error) {
	var o auditOptions
	fs := flag.NewFlagSet("kubectl gcsfuse audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	files := (*fileList)(&o.files)
	fs.Var(files, "f", "manifest file, directory or - (stdin); repeatable")
	fs.Var(files, "filename", "same as -f")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to read (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&o.context, "context", "", "kubeconfig context")
	fs.StringVar(&o.namespace, "n", "", "read this namespace only (default: all namespaces)")
	fs.StringVar(&o.namespace, "namespace", "", "same as -n")
	sharedADC := fs.String("shared-adc-namespaces", "", "the installed chart's mounter.adcNamespaces, comma separated")
	fs.BoolVar(&o.settings.SharedFederated, "shared-federated", false, "the installed chart federates shared volumes (node.wifProvider or mounter.identityProvider)")
	fs.BoolVar(&o.settings.NodeFederated, "node-federated", false, "the installed chart federates every volume without an identity of its own (node.wifProvider)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	adc, err := credentials.ParseSharedADC(*sharedADC)
	if err != nil {
		return o, fmt.Errorf("--shared-adc-namespaces: %w", err)
	}
	o.settings.SharedADC = adc
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (files go after -f)", fs.Arg(0))
	}
	if len(o.files) > 0 && (o.kubeconfig != "" || o.context != "" || o.namespace != "") {
		return o, errors.New("-f reads manifests, --kubeconfig, --context and -n read a cluster: give one or the other")
	}
	stdinCount := 0
	for _, f := range o.files {
		if f == "-" {
			stdinCount++
		}
	}
	if stdinCount > 1 {
		return o, errors.New("-f - (stdin) given more than once")
	}
	return o, nil
}

// manifestExtensions are the files a directory's walk reads.
var manifestExtensions = map[string]bool{".yaml": true, ".yml": true, ".json": true}

// readManifests adds the objects of every input: a file, a directory (walked, in lexical
// order, for manifestExtensions) or "-" (stdin).
func readManifests(inv *audit.Inventory, inputs []string, stdin io.Reader) error {
	for _, in := range inputs {
		if in == "-" {
			data, err := audit.ReadManifest("<stdin>", stdin)
			if err != nil {
				return err
			}
			if err := inv.AddManifest("<stdin>", data); err != nil {
				return err
			}
			continue
		}
		st, err := os.Stat(in)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			if err := addFile(inv, in); err != nil {
				return err
			}
			continue
		}
		found := false
		err = filepath.WalkDir(in, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !manifestExtensions[strings.ToLower(filepath.Ext(path))] {
				return nil
			}
			found = true
			return addFile(inv, path)
		})
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%s: no *.yaml, *.yml or *.json file in the directory", in)
		}
	}
	return nil
}

func addFile(inv *audit.Inventory, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := audit.ReadManifest(path, f)
	if err != nil {
		return err
	}
	return inv.AddManifest(path, data)
}
