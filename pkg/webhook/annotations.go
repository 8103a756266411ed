package webhook

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// knownAnnotations are the annotations under contract.AnnotationPrefix that this webhook
// understands. Any other key under the prefix gets a warning: a typo such as "cpu-limt"
// would otherwise be ignored without the user ever knowing.
var knownAnnotations = map[string]bool{
	contract.AnnotationInject:                  true,
	contract.AnnotationSidecarMode:             true,
	contract.AnnotationIgnoreContainers:        true,
	contract.AnnotationCPURequest:              true,
	contract.AnnotationCPULimit:                true,
	contract.AnnotationMemoryRequest:           true,
	contract.AnnotationMemoryLimit:             true,
	contract.AnnotationEphemeralStorageRequest: true,
	contract.AnnotationEphemeralStorageLimit:   true,
	contract.AnnotationInjected:                true,
	contract.AnnotationCredentialConfigMap:     true,
}

// podOptions is what the user asked for through our annotations, validated.
type podOptions struct {
	// forcedMode is contract.ModeNative or contract.ModeLegacy when the user chose the
	// mode with contract.AnnotationSidecarMode, "" to let the cluster versions decide.
	forcedMode string
	// injected is the value of contract.AnnotationInjected, "" when absent.
	injected  string
	resources corev1.ResourceRequirements
}

// optedIn reports what the pod's opt-in annotation says, and whether it is there at all.
// Only the exact strings "true" and "false" are accepted: "yes" or "True" is more likely a
// mistake than a decision.
func optedIn(annotations map[string]string) (opted, set bool, err error) {
	v, ok := annotations[contract.AnnotationInject]
	if !ok {
		return false, false, nil
	}
	switch v {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	default:
		return false, true, badAnnotation(contract.AnnotationInject, v, `must be "true" or "false"`)
	}
}

// parseOptions validates every annotation of ours on an opted-in pod. A bad value is an
// error (a 400 for the user), never a silent fallback to the default.
func parseOptions(annotations map[string]string, defaults ResourceDefaults) (podOptions, error) {
	var opts podOptions
	if v, ok := annotations[contract.AnnotationSidecarMode]; ok {
		if err := validateMode(contract.AnnotationSidecarMode, v); err != nil {
			return podOptions{}, err
		}
		opts.forcedMode = v
	}
	if v, ok := annotations[contract.AnnotationInjected]; ok {
		if err := validateMode(contract.AnnotationInjected, v); err != nil {
			return podOptions{}, err
		}
		opts.injected = v
	}
	if v, ok := annotations[contract.AnnotationIgnoreContainers]; ok {
		if err := validateContainerList(contract.AnnotationIgnoreContainers, v); err != nil {
			return podOptions{}, err
		}
	}
	res, err := sidecarResources(annotations, defaults)
	if err != nil {
		return podOptions{}, err
	}
	opts.resources = res
	return opts, nil
}

func validateMode(annotation, v string) error {
	if v != contract.ModeNative && v != contract.ModeLegacy {
		return badAnnotation(annotation, v, fmt.Sprintf("must be %q or %q", contract.ModeLegacy, contract.ModeNative))
	}
	return nil
}

// validateContainerList checks a comma separated list of container names. Empty entries
// (a trailing comma) are tolerated; anything that cannot be a container name is not.
func validateContainerList(annotation, v string) error {
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return badAnnotation(annotation, v, fmt.Sprintf("%q is not a container name: %s", name, strings.Join(errs, "; ")))
		}
	}
	return nil
}

// unknownAnnotationWarnings warns about keys under our prefix that we do not know.
func unknownAnnotationWarnings(annotations map[string]string) []string {
	var warnings []string
	for k := range annotations {
		if strings.HasPrefix(k, contract.AnnotationPrefix) && !knownAnnotations[k] {
			warnings = append(warnings, fmt.Sprintf("annotation %s is not known to the gcsfuse webhook and is ignored", k))
		}
	}
	sort.Strings(warnings)
	return warnings
}

// ignoredAnnotationWarnings warns, on a pod that did not opt in, about our annotations that
// therefore have no effect: the user probably forgot the opt-in annotation.
func ignoredAnnotationWarnings(annotations map[string]string) []string {
	var keys []string
	for k := range annotations {
		if k != contract.AnnotationInject && k != contract.AnnotationInjected && strings.HasPrefix(k, contract.AnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	return []string{fmt.Sprintf("annotations %s are ignored: the pod does not have %s: \"true\"",
		strings.Join(keys, ", "), contract.AnnotationInject)}
}
