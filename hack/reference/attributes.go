package main

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// ---- volume attributes ----------------------------------------------------------------

// bucket is the examples' bucket, also their volume handle.
const bucket = "my-bucket"

// example is one input and, in a row, the code's answer to it.
type example struct {
	// attrs are the volume's attributes (or the pod's annotations); the first key named
	// by the entry is the one shown.
	attrs map[string]string
	// with says what else the example needs, shown beside it ("" none).
	with string
}

// attribute is one of our volume attributes: a contract.Attr* constant.
type attribute struct {
	constName string
	name      string
	what      string
	examples  []example
	// read says what the code makes of an example.
	read func(attrs map[string]string) string
}

const (
	exampleProvider = "//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/my-pool/providers/my-provider"
	exampleCluster  = "https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/my-cluster"
	exampleSA       = "reader@my-project.iam.gserviceaccount.com"
)

func attributes() []attribute {
	one := func(k, v string) example { return example{attrs: map[string]string{k: v}} }
	fed := func(k, v string) example {
		return example{attrs: map[string]string{k: v, contract.AttrWorkloadIdentityProvider: exampleProvider},
			with: "with `" + contract.AttrWorkloadIdentityProvider + "`"}
	}
	return []attribute{
		{"AttrBucketName", contract.AttrBucketName,
			"The bucket. Absent: the volume handle names it (`bucket`, or `bucket:suffix` to mount one bucket twice in a pod).",
			[]example{one(contract.AttrBucketName, "other-bucket"), one(contract.AttrBucketName, "_")}, readBucket},
		{"AttrMountOptions", contract.AttrMountOptions,
			"Mount options, comma separated ([Mount options](#mount-options)), after a PersistentVolume's `mountOptions`.",
			[]example{one(contract.AttrMountOptions, "implicit-dirs,metadata-cache:ttl-secs:60"), one(contract.AttrMountOptions, "key-file=/k.json")}, readFlags},
		{"AttrFileCacheCapacity", contract.AttrFileCacheCapacity,
			"Size of gcsfuse's file cache (a quantity, `-1` for no limit): turns the cache on, in a volume the sidecar gets for it.",
			[]example{one(contract.AttrFileCacheCapacity, "10Gi"), one(contract.AttrFileCacheCapacity, "-1")}, readFlags},
		{"AttrMountMode", contract.AttrMountMode,
			"Where the volume's gcsfuse runs: `" + contract.MountModeSidecar + "` (the default: the pod's sidecar) or `" + contract.MountModeShared + "` (the node's mounter, shared by the pods of one bucket, options and identity).",
			[]example{one(contract.AttrMountMode, contract.MountModeShared), one(contract.AttrMountMode, "node")}, readMode},
		{"AttrWorkloadIdentityProvider", contract.AttrWorkloadIdentityProvider,
			"Workload Identity Federation provider (the STS audience): gcsfuse reads as the pod's own Kubernetes service account, its token exchanged there. Overrides the node plugin's `--wif-provider`.",
			[]example{one(contract.AttrWorkloadIdentityProvider, exampleProvider), one(contract.AttrWorkloadIdentityProvider, "my-provider")}, readIdentity},
		{"AttrServiceAccount", contract.AttrServiceAccount,
			"Google service account the federated identity impersonates; empty: none. Needs a provider.",
			[]example{fed(contract.AttrServiceAccount, exampleSA), one(contract.AttrServiceAccount, exampleSA)}, readIdentity},
		{"AttrTokenURL", contract.AttrTokenURL,
			"STS token exchange URL: the node plugin's `--wif-token-url` or one of its `--wif-allowed-token-urls`. Needs a provider.",
			[]example{fed(contract.AttrTokenURL, credentials.DefaultTokenURL), fed(contract.AttrTokenURL, "https://sts.example.com/v1/token")}, readIdentity},
		{"AttrGKEIdentityProvider", contract.AttrGKEIdentityProvider,
			"The GKE driver's name for the provider: a GKE cluster's identity provider URL, or a Workload Identity pool provider.",
			[]example{one(contract.AttrGKEIdentityProvider, exampleCluster), one(contract.AttrGKEIdentityProvider, exampleProvider)}, readIdentity},
		{"AttrGKEIdentityPool", contract.AttrGKEIdentityPool,
			"The GKE driver's identity pool, `PROJECT.svc.id.goog`, with a cluster's `" + contract.AttrGKEIdentityProvider + "`.",
			[]example{{attrs: map[string]string{contract.AttrGKEIdentityPool: "other-project.svc.id.goog", contract.AttrGKEIdentityProvider: exampleCluster},
				with: "with `" + contract.AttrGKEIdentityProvider + ": " + exampleCluster + "`"},
				one(contract.AttrGKEIdentityPool, "other-project.svc.id.goog")}, readIdentity},
	}
}

// kubeletKeys are the volume context keys the kubelet adds (contract.Ctx*).
var kubeletKeys = []struct{ constName, name, what string }{
	{"CtxPodName", contract.CtxPodName, "the pod's name"},
	{"CtxPodNamespace", contract.CtxPodNamespace, "the pod's namespace"},
	{"CtxPodUID", contract.CtxPodUID, "the pod's UID"},
	{"CtxSAName", contract.CtxSAName, "the pod's service account"},
	{"CtxEphemeral", contract.CtxEphemeral, "`true` for an inline volume"},
	{"CtxSATokens", contract.CtxSATokens, "the pod's service account tokens (the CSIDriver's `tokenRequests`)"},
}

// gkeAttributes are examples of each of the GKE driver's volume attributes that
// pkg/mountopts reads (incumbentAttrs): accepted ones first, then refused values.
var gkeAttributes = map[string][]string{
	"fileCacheForRangeRead":          {"true"},
	"metadataStatCacheCapacity":      {"32Mi", "-1"},
	"metadataTypeCacheCapacity":      {"64Mi"},
	"metadataCacheTTLSeconds":        {"600"},
	"metadataCacheTtlSeconds":        {"600"},
	"gcsfuseLoggingSeverity":         {"debug", "verbose"},
	"gcsfuseMetadataPrefetchOnMount": {"true", "false"},
	"skipCSIBucketAccessCheck":       {"true"},
	"enableCloudProfilerForSidecar":  {"false", "true"},
	"multiNICIndex":                  {"-1", "0"},
	"hostNetworkPodKSA":              {"true"},
	"disableMetrics":                 {"true", "false"},
}

// explain is mountopts.Explain on a volume whose handle is the example bucket.
func explain(attrs map[string]string) (*mountopts.Volume, []mountopts.Mapping, error) {
	return mountopts.Explain(attrs, nil, bucket)
}

func refused(err error) string { return "refused: " + md(err.Error()) }

func readBucket(attrs map[string]string) string {
	v, _, err := explain(attrs)
	if err != nil {
		return refused(err)
	}
	return "bucket " + code(v.Bucket)
}

func readFlags(attrs map[string]string) string {
	v, _, err := explain(attrs)
	if err != nil {
		return refused(err)
	}
	return flags(v.Flags)
}

func readMode(attrs map[string]string) string {
	shared, err := mountopts.MountMode(attrs)
	if err == nil {
		_, _, err = explain(attrs)
	}
	switch {
	case err != nil:
		return refused(err)
	case shared:
		return "gcsfuse in the node's mounter"
	}
	return "gcsfuse in the pod's sidecar"
}

func readIdentity(attrs map[string]string) string {
	if _, _, err := explain(attrs); err != nil {
		return refused(err)
	}
	c, err := credentials.Choose(credentials.Config{}.WithDefaults(), attrs, false)
	if err != nil {
		return refused(err)
	}
	s := string(c.Kind)
	if c.Provider != "" {
		s += ", provider " + code(c.Provider)
	}
	if c.ServiceAccount != "" {
		s += ", impersonating " + code(c.ServiceAccount)
	}
	if c.TokenURL != "" {
		s += ", token URL " + code(c.TokenURL)
	}
	return s
}

func flags(f []string) string {
	if len(f) == 0 {
		return "no gcsfuse flag"
	}
	return "flags " + code(strings.Join(f, " "))
}

// inClass is what classparams.Parse says of a StorageClass with the example's attributes:
// "refused likewise" when it refuses them as the volume is refused.
func inClass(attrs map[string]string) string {
	params := map[string]string{contract.AttrBucketName: bucket}
	for k, v := range attrs {
		params[k] = v
	}
	_, err := classparams.Parse(params)
	if err == nil {
		return "yes"
	}
	if _, _, verr := explain(attrs); verr != nil && strings.HasSuffix(err.Error(), verr.Error()) {
		return "refused likewise"
	}
	return refused(err)
}

func (g *gen) attributes() error {
	attrs := attributes()
	var names []string
	for _, a := range attrs {
		names = append(names, a.constName)
	}
	for _, k := range kubeletKeys {
		names = append(names, k.constName)
	}
	if err := g.sameNames("the volume attributes (pkg/contract Attr* and Ctx* constants)", "pkg/contract",
		constNamesFunc(func(n string) bool { return strings.HasPrefix(n, "Attr") || strings.HasPrefix(n, "Ctx") }), names); err != nil {
		return err
	}
	g.p("")
	g.p("## Volume attributes")
	g.p("")
	g.p("An inline volume's `volumeAttributes` or a PersistentVolume's `spec.csi.volumeAttributes`.")
	g.p("A StorageClass's parameters become them ([StorageClass parameters](#storageclass-parameters)).")
	g.p("Any other key, like any value refused below, fails the mount with a message naming it, so")
	g.p("a misspelt one is never ignored; the webhook denies a pod whose inline volume has one")
	g.p("(identity attributes excepted: they are checked at mount only). The examples are volumes")
	g.p("whose handle is `" + bucket + "`.")
	g.p("")
	g.header("attribute", "example", "the code reads it as", "as a StorageClass parameter", "what it is")
	for _, a := range attrs {
		for i, ex := range a.examples {
			what := ""
			if i == 0 {
				what = a.what
			}
			g.row(code(a.name), showExample(a.name, ex), a.read(ex.attrs), inClass(ex.attrs), what)
		}
	}
	g.p("")
	g.p("The kubelet adds these keys itself (the CSIDriver has `podInfoOnMount` and `tokenRequests`);")
	g.p("any key under `csi.storage.k8s.io/` is accepted:")
	g.p("")
	for _, k := range kubeletKeys {
		g.p("- " + code(k.name) + ": " + k.what)
	}
	return g.gkeAttributes()
}

func showExample(name string, ex example) string {
	s := code(name + ": " + ex.attrs[name])
	if ex.with != "" {
		s += " " + ex.with
	}
	return s
}

func (g *gen) gkeAttributes() error {
	keys, err := mapKeys(filepath.Join(g.root, "pkg", "mountopts"), "incumbentAttrs")
	if err != nil {
		return err
	}
	have := slices.Collect(maps.Keys(gkeAttributes))
	if err := differ("the GKE driver's volume attributes (pkg/mountopts incumbentAttrs)", keys, have); err != nil {
		return err
	}
	g.p("")
	g.p("### The GKE driver's volume attributes")
	g.p("")
	g.p("Read so that volumes written for the GKE Cloud Storage FUSE CSI driver work unchanged: each")
	g.p("becomes the gcsfuse option of the same meaning, checked as that option is, or is accepted")
	g.p("only with a value that asks for nothing here. Its `" + contract.AttrGKEIdentityProvider + "` and `" + contract.AttrGKEIdentityPool + "` are in the table above.")
	g.p("")
	g.header("attribute", "example", "becomes")
	for _, k := range keys {
		for _, v := range gkeAttributes[k] {
			g.row(code(k), code(k+": "+v), gkeBecomes(k, v))
		}
	}
	return nil
}

func gkeBecomes(k, v string) string {
	_, maps, err := explain(map[string]string{k: v})
	if err != nil {
		return refused(err)
	}
	for _, m := range maps {
		if m.From != k+"="+v {
			continue
		}
		if len(m.To) == 0 {
			return "nothing: " + md(m.Note)
		}
		return flags(m.To)
	}
	return "nothing"
}
