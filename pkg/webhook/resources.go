package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// ResourceDefaults are the sidecar's requests and limits for the resources whose annotations
// a pod does not set. A resource absent from a list gets no request (or no limit).
type ResourceDefaults struct {
	Requests corev1.ResourceList
	Limits   corev1.ResourceList
}

// Validate rejects defaults that would produce an invalid container: a negative quantity or
// a request above its limit. Checking at startup turns an operator typo into a crash loop
// with a clear message instead of every pod in the cluster being denied.
func (d ResourceDefaults) Validate() error {
	for _, list := range []corev1.ResourceList{d.Requests, d.Limits} {
		for name, q := range list {
			if q.Sign() < 0 {
				return fmt.Errorf("default %s %s is negative", name, q.String())
			}
		}
	}
	for name, req := range d.Requests {
		lim, ok := d.Limits[name]
		if ok && !req.IsZero() && !lim.IsZero() && req.Cmp(lim) > 0 {
			return fmt.Errorf("default %s request %s is greater than the default limit %s", name, req.String(), lim.String())
		}
	}
	return nil
}

// resourceAnnotation ties one resource to its pair of annotations.
type resourceAnnotation struct {
	name    corev1.ResourceName
	request string
	limit   string
}

var resourceAnnotations = []resourceAnnotation{
	{corev1.ResourceCPU, contract.AnnotationCPURequest, contract.AnnotationCPULimit},
	{corev1.ResourceMemory, contract.AnnotationMemoryRequest, contract.AnnotationMemoryLimit},
	{corev1.ResourceEphemeralStorage, contract.AnnotationEphemeralStorageRequest, contract.AnnotationEphemeralStorageLimit},
}

// sidecarResources computes the sidecar's resources from the pod's annotations:
//   - both annotations of a resource set: used as given;
//   - only one set: it is copied to the other, so "memory-limit: 1Gi" alone gives a
//     Guaranteed-style 1Gi/1Gi rather than mixing the user's limit with our default request;
//   - neither set: the webhook's defaults;
//   - "0" (any zero quantity) means unlimited: neither request nor limit for that resource.
//
// A value that does not parse, a negative one, or a request above its limit is a 400.
func sidecarResources(annotations map[string]string, defaults ResourceDefaults) (corev1.ResourceRequirements, error) {
	req := corev1.ResourceList{}
	lim := corev1.ResourceList{}
	for _, ra := range resourceAnnotations {
		reqStr, hasReq := annotations[ra.request]
		limStr, hasLim := annotations[ra.limit]
		var reqQ, limQ resource.Quantity
		var reqSet, limSet bool
		if hasReq {
			q, err := parseQuantity(ra.request, reqStr)
			if err != nil {
				return corev1.ResourceRequirements{}, err
			}
			reqQ, reqSet = q, true
		}
		if hasLim {
			q, err := parseQuantity(ra.limit, limStr)
			if err != nil {
				return corev1.ResourceRequirements{}, err
			}
			limQ, limSet = q, true
		}
		switch {
		case reqSet && !limSet:
			limQ, limSet = reqQ.DeepCopy(), true
		case limSet && !reqSet:
			reqQ, reqSet = limQ.DeepCopy(), true
		case !reqSet && !limSet:
			reqQ, reqSet = defaults.Requests[ra.name]
			limQ, limSet = defaults.Limits[ra.name]
		}
		if reqSet && limSet && !reqQ.IsZero() && !limQ.IsZero() && reqQ.Cmp(limQ) > 0 {
			return corev1.ResourceRequirements{}, badAnnotation(ra.request, reqStr,
				fmt.Sprintf("request is greater than the limit %q (annotation %s)", limStr, ra.limit))
		}
		if reqSet && !reqQ.IsZero() {
			req[ra.name] = reqQ
		}
		if limSet && !limQ.IsZero() {
			lim[ra.name] = limQ
		}
	}
	var out corev1.ResourceRequirements
	if len(req) > 0 {
		out.Requests = req
	}
	if len(lim) > 0 {
		out.Limits = lim
	}
	return out, nil
}

func parseQuantity(annotation, v string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return resource.Quantity{}, badAnnotation(annotation, v, "not a resource quantity (for example 500m, 1Gi or 0 for unlimited)")
	}
	if q.Sign() < 0 {
		return resource.Quantity{}, badAnnotation(annotation, v, "must not be negative")
	}
	return q, nil
}
