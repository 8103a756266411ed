package webhook

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The rules that fit the sidecar's resources to a namespace's ResourceQuotas and
// LimitRanges (quota.go says why). Pure functions of the policy, table-tested.

// fallbackRequests are the requests of a sidecar that a quota or LimitRange obliges to have
// one when nothing else gives it a value (no LimitRange default, no limit, no webhook
// default): the chart's default requests (cmd/gcsfuse-webhook's resourceFlags).
var fallbackRequests = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("100m"),
	corev1.ResourceMemory:           resource.MustParse("128Mi"),
	corev1.ResourceEphemeralStorage: resource.MustParse("5Gi"),
}

// containerBounds is what a namespace's LimitRanges of type Container say about one
// resource. Defaults are those of the first LimitRange (by name) that has one, like the
// API server's LimitRanger; min and ratio are the highest and lowest of all, max the
// lowest, each with the LimitRange that set it, for messages.
type containerBounds struct {
	defaultRequest, defaultLimit *resource.Quantity
	min, max, ratio              *resource.Quantity
	minFrom, maxFrom, ratioFrom  string
}

// boundsOf merges the LimitRanges' Container items for name. Each item is read with the
// API server's defaulting of LimitRange items (a max is the default limit, a default limit
// the default request, a min the default request), so that a hand-written item in a test
// reads like a stored one.
func boundsOf(ranges []corev1.LimitRange, name corev1.ResourceName) containerBounds {
	sorted := slices.Clone(ranges)
	slices.SortFunc(sorted, func(a, b corev1.LimitRange) int { return strings.Compare(a.Name, b.Name) })
	var b containerBounds
	for _, lr := range sorted {
		for _, item := range lr.Spec.Limits {
			if item.Type != corev1.LimitTypeContainer {
				continue
			}
			def := firstOf(item.Default, item.Max, name)
			defReq := firstOf(item.DefaultRequest, item.Default, name)
			if defReq == nil {
				defReq = firstOf(item.Max, item.Min, name)
			}
			if b.defaultLimit == nil {
				b.defaultLimit = def
			}
			if b.defaultRequest == nil {
				b.defaultRequest = defReq
			}
			if q, ok := item.Min[name]; ok && (b.min == nil || q.Cmp(*b.min) > 0) {
				b.min, b.minFrom = &q, lr.Name
			}
			if q, ok := item.Max[name]; ok && (b.max == nil || q.Cmp(*b.max) < 0) {
				b.max, b.maxFrom = &q, lr.Name
			}
			if q, ok := item.MaxLimitRequestRatio[name]; ok && (b.ratio == nil || q.Cmp(*b.ratio) < 0) {
				b.ratio, b.ratioFrom = &q, lr.Name
			}
		}
	}
	return b
}

// firstOf returns name's quantity in the first list that has it, nil in none.
func firstOf(a, b corev1.ResourceList, name corev1.ResourceName) *resource.Quantity {
	for _, l := range []corev1.ResourceList{a, b} {
		if q, ok := l[name]; ok {
			return &q
		}
	}
	return nil
}

// quotaKeys are the ResourceQuota keys that count name's requests and limits.
func quotaKeys(name corev1.ResourceName) (requests []corev1.ResourceName, limits corev1.ResourceName) {
	return []corev1.ResourceName{"requests." + name, name}, "limits." + name
}

// quotaNeeds tells whether a ResourceQuota makes every container state a request (or a
// limit) for name, naming the first such quota (by name) and key.
func quotaNeeds(quotas []corev1.ResourceQuota, name corev1.ResourceName) (request, limit string) {
	reqKeys, limKey := quotaKeys(name)
	sorted := slices.Clone(quotas)
	slices.SortFunc(sorted, func(a, b corev1.ResourceQuota) int { return strings.Compare(a.Name, b.Name) })
	for _, q := range sorted {
		for _, k := range reqKeys {
			if _, ok := q.Spec.Hard[k]; ok && request == "" {
				request = fmt.Sprintf("ResourceQuota %s (%s)", q.Name, k)
			}
		}
		if _, ok := q.Spec.Hard[limKey]; ok && limit == "" {
			limit = fmt.Sprintf("ResourceQuota %s (%s)", q.Name, limKey)
		}
	}
	return request, limit
}

// fitSidecarResources fits res, the sidecar's resources from sidecarResources, to the
// namespace's policy, for each of cpu, memory and ephemeral-storage:
//
//   - a ResourceQuota naming requests.X or X needs a request, one naming limits.X a limit;
//     a LimitRange min needs a request, a max a limit, a maxLimitRequestRatio both;
//   - a missing request takes the LimitRange's defaultRequest, else the sidecar's limit,
//     else the webhook's default request, else fallbackRequests; a missing limit takes the
//     LimitRange's default, else the request (Guaranteed-style);
//   - then request and limit are clamped into the LimitRanges' min and max, and the request
//     raised to meet maxLimitRequestRatio.
//
// A resource the pod's annotations set is never changed: a value outside the bounds, or a
// "0" where a request or limit is needed, is a denial naming the annotation and the bound.
// Without quotas or LimitRanges res comes back unchanged.
func fitSidecarResources(res corev1.ResourceRequirements, annotations map[string]string, defaults ResourceDefaults, pol ResourcePolicy) (corev1.ResourceRequirements, error) {
	if len(pol.Quotas) == 0 && len(pol.LimitRanges) == 0 {
		return res, nil
	}
	out := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for k, v := range res.Requests {
		out.Requests[k] = v.DeepCopy()
	}
	for k, v := range res.Limits {
		out.Limits[k] = v.DeepCopy()
	}
	for _, ra := range resourceAnnotations {
		b := boundsOf(pol.LimitRanges, ra.name)
		reqBy, limBy := quotaNeeds(pol.Quotas, ra.name)
		if reqBy == "" && b.min != nil {
			reqBy = fmt.Sprintf("LimitRange %s (min %s %s)", b.minFrom, ra.name, b.min.String())
		}
		if limBy == "" && b.max != nil {
			limBy = fmt.Sprintf("LimitRange %s (max %s %s)", b.maxFrom, ra.name, b.max.String())
		}
		if b.ratio != nil {
			ratioBy := fmt.Sprintf("LimitRange %s (maxLimitRequestRatio %s %s)", b.ratioFrom, ra.name, b.ratio.String())
			reqBy, limBy = cmp.Or(reqBy, ratioBy), cmp.Or(limBy, ratioBy)
		}
		_, reqAnn := annotations[ra.request]
		_, limAnn := annotations[ra.limit]
		var err error
		if reqAnn || limAnn {
			err = checkAnnotated(ra, reqAnn, limAnn, annotations, out, b, reqBy, limBy)
		} else {
			fillAndClamp(ra.name, out, b, reqBy != "", limBy != "", defaults)
		}
		if err != nil {
			return corev1.ResourceRequirements{}, err
		}
	}
	if len(out.Requests) == 0 {
		out.Requests = nil
	}
	if len(out.Limits) == 0 {
		out.Limits = nil
	}
	return out, nil
}

// fillAndClamp applies fitSidecarResources' rules to a resource the annotations do not set.
func fillAndClamp(name corev1.ResourceName, out corev1.ResourceRequirements, b containerBounds, needReq, needLim bool, defaults ResourceDefaults) {
	req, hasReq := out.Requests[name]
	lim, hasLim := out.Limits[name]
	if needReq && !hasReq {
		switch {
		case b.defaultRequest != nil:
			req = b.defaultRequest.DeepCopy()
		case hasLim:
			req = lim.DeepCopy()
		default:
			if q, ok := defaults.Requests[name]; ok && !q.IsZero() {
				req = q.DeepCopy()
			} else {
				req = fallbackRequests[name].DeepCopy()
			}
		}
		hasReq = true
	}
	if needLim && !hasLim {
		switch {
		case b.defaultLimit != nil:
			lim = b.defaultLimit.DeepCopy()
		case hasReq:
			lim = req.DeepCopy()
		default:
			lim = fallbackRequests[name].DeepCopy()
		}
		hasLim = true
	}
	if hasLim && !hasReq {
		// The API server defaults a missing request to the limit: say so, so that the
		// checks below see what will be enforced.
		req, hasReq = lim.DeepCopy(), true
	}
	if b.min != nil {
		if hasReq && req.Cmp(*b.min) < 0 {
			req = b.min.DeepCopy()
		}
		if hasLim && lim.Cmp(*b.min) < 0 {
			lim = b.min.DeepCopy()
		}
	}
	if b.max != nil {
		if hasLim && lim.Cmp(*b.max) > 0 {
			lim = b.max.DeepCopy()
		}
		if hasReq && req.Cmp(*b.max) > 0 {
			req = b.max.DeepCopy()
		}
	}
	if hasReq && hasLim && req.Cmp(lim) > 0 {
		req = lim.DeepCopy()
	}
	if b.ratio != nil && hasReq && hasLim && !ratioOK(req, lim, *b.ratio) {
		req = minRequestForRatio(lim, *b.ratio)
	}
	if hasReq {
		out.Requests[name] = req
	}
	if hasLim {
		out.Limits[name] = lim
	}
}

// ratioOK reports whether lim/req <= ratio, as the LimitRanger computes it (in milli-units).
func ratioOK(req, lim, ratio resource.Quantity) bool {
	if req.IsZero() {
		return false
	}
	return float64(lim.MilliValue())/float64(req.MilliValue()) <= ratio.AsApproximateFloat64()
}

// minRequestForRatio is the smallest request that keeps lim within ratio of it.
func minRequestForRatio(lim, ratio resource.Quantity) resource.Quantity {
	milli := int64(math.Ceil(float64(lim.MilliValue()) / ratio.AsApproximateFloat64()))
	if milli > lim.MilliValue() {
		milli = lim.MilliValue()
	}
	return *resource.NewMilliQuantity(milli, lim.Format)
}

// checkAnnotated denies a resource set by the pod's annotations that the policy refuses:
// the user chose the value, so the webhook names the conflict instead of changing it.
func checkAnnotated(ra resourceAnnotation, reqAnn, limAnn bool, annotations map[string]string, out corev1.ResourceRequirements, b containerBounds, reqBy, limBy string) error {
	// The annotation a value came from: sidecarResources copies one to the other.
	reqFrom, limFrom := ra.request, ra.limit
	if !reqAnn {
		reqFrom = ra.limit
	}
	if !limAnn {
		limFrom = ra.request
	}
	req, hasReq := out.Requests[ra.name]
	lim, hasLim := out.Limits[ra.name]
	if hasLim && !hasReq {
		req, hasReq = lim, true
	}
	switch {
	case reqBy != "" && !hasReq:
		return badAnnotation(reqFrom, annotations[reqFrom], fmt.Sprintf("asks for no %s request, but %s requires one", ra.name, reqBy))
	case limBy != "" && !hasLim:
		return badAnnotation(limFrom, annotations[limFrom], fmt.Sprintf("asks for no %s limit, but %s requires one", ra.name, limBy))
	}
	if b.min != nil {
		if hasReq && req.Cmp(*b.min) < 0 {
			return badAnnotation(reqFrom, annotations[reqFrom], fmt.Sprintf("the %s request is below the minimum %s of LimitRange %s", ra.name, b.min.String(), b.minFrom))
		}
		if hasLim && lim.Cmp(*b.min) < 0 {
			return badAnnotation(limFrom, annotations[limFrom], fmt.Sprintf("the %s limit is below the minimum %s of LimitRange %s", ra.name, b.min.String(), b.minFrom))
		}
	}
	if b.max != nil {
		if hasLim && lim.Cmp(*b.max) > 0 {
			return badAnnotation(limFrom, annotations[limFrom], fmt.Sprintf("the %s limit is above the maximum %s of LimitRange %s", ra.name, b.max.String(), b.maxFrom))
		}
		if hasReq && req.Cmp(*b.max) > 0 {
			return badAnnotation(reqFrom, annotations[reqFrom], fmt.Sprintf("the %s request is above the maximum %s of LimitRange %s", ra.name, b.max.String(), b.maxFrom))
		}
	}
	if b.ratio != nil && hasReq && hasLim && !ratioOK(req, lim, *b.ratio) {
		return badAnnotation(reqFrom, annotations[reqFrom], fmt.Sprintf("the %s limit %s is more than %s times the request, the maxLimitRequestRatio of LimitRange %s",
			ra.name, lim.String(), b.ratio.String(), b.ratioFrom))
	}
	return nil
}

// podTotals is what a pod spec counts against a quota for the requests (limits=false) or
// limits of cpu, memory and ephemeral-storage, the API server's way: the regular
// containers and every native sidecar run together; a regular init container runs with
// the native sidecars started before it; a native sidecar starts with those before it;
// the pod counts the largest of these, plus its overhead.
func podTotals(spec corev1.PodSpec, limits bool) corev1.ResourceList {
	pick := func(c corev1.Container) corev1.ResourceList {
		if limits {
			return c.Resources.Limits
		}
		return c.Resources.Requests
	}
	total := corev1.ResourceList{}
	for _, c := range spec.Containers {
		addTo(total, pick(c))
	}
	running, peak := corev1.ResourceList{}, corev1.ResourceList{}
	for _, c := range spec.InitContainers {
		if isRestartable(c) {
			addTo(running, pick(c))
			maxInto(peak, running)
			continue
		}
		at := corev1.ResourceList{}
		addTo(at, running)
		addTo(at, pick(c))
		maxInto(peak, at)
	}
	addTo(total, running)
	maxInto(total, peak)
	addTo(total, spec.Overhead)
	return total
}

func addTo(sum, l corev1.ResourceList) {
	for _, ra := range resourceAnnotations {
		if q, ok := l[ra.name]; ok {
			s := sum[ra.name]
			s.Add(q)
			sum[ra.name] = s
		}
	}
}

func maxInto(into, l corev1.ResourceList) {
	for _, ra := range resourceAnnotations {
		if q, ok := l[ra.name]; ok {
			if cur, ok := into[ra.name]; !ok || q.Cmp(cur) > 0 {
				into[ra.name] = q.DeepCopy()
			}
		}
	}
}

// checkQuotaRoom denies a pod that fits in every ResourceQuota's room (status hard minus
// used) without the sidecar but not with it, naming the quota, the resource and the
// sidecar's share. A pod that does not fit even alone is left to the API server, whose
// message is about the pod. Quotas with scopes are skipped: whether they apply to the pod
// is the API server's to tell, and a wrong denial is worse than its own refusal.
func checkQuotaRoom(quotas []corev1.ResourceQuota, without, with corev1.PodSpec) error {
	sorted := slices.Clone(quotas)
	slices.SortFunc(sorted, func(a, b corev1.ResourceQuota) int { return strings.Compare(a.Name, b.Name) })
	totals := map[bool][2]corev1.ResourceList{
		false: {podTotals(without, false), podTotals(with, false)},
		true:  {podTotals(without, true), podTotals(with, true)},
	}
	for _, q := range sorted {
		if len(q.Spec.Scopes) > 0 || q.Spec.ScopeSelector != nil {
			continue
		}
		for _, ra := range resourceAnnotations {
			reqKeys, limKey := quotaKeys(ra.name)
			for _, key := range append(reqKeys, limKey) {
				hard, ok := q.Status.Hard[key]
				if !ok {
					continue
				}
				isLimit := key == limKey
				left := hard.DeepCopy()
				left.Sub(q.Status.Used[key])
				wo, wi := totals[isLimit][0][ra.name], totals[isLimit][1][ra.name]
				if wo.Cmp(left) > 0 || wi.Cmp(left) <= 0 {
					continue
				}
				share := wi.DeepCopy()
				share.Sub(wo)
				annotation := ra.request
				if isLimit {
					annotation = ra.limit
				}
				return badRequest("the gcsfuse sidecar adds %s %s; quota %s has %s left (hard %s, used %s), enough for the pod without the sidecar. "+
					"Lower the sidecar's share with the annotation %s, or raise the quota",
					key, share.String(), q.Name, left.String(), hard.String(), usedOf(q, key), annotation)
			}
		}
	}
	return nil
}

func usedOf(q corev1.ResourceQuota, key corev1.ResourceName) string {
	u := q.Status.Used[key]
	return u.String()
}
