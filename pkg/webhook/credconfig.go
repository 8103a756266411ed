package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
)

const (
	// configMapLookupTimeout bounds the read of a pod's credential ConfigMap, well inside
	// the webhook's 10 s timeout.
	configMapLookupTimeout = 3 * time.Second
	// configMapCacheTTL is how long a ConfigMap read is reused: a burst of a Job's pods
	// naming one ConfigMap costs one GET per namespace and name in that time, not one per
	// pod. An edit reaches the pods admitted after it at most this late.
	configMapCacheTTL = 10 * time.Second
	// configMapCacheMax bounds the cache, of configMapCacheBytes at most each (16 MiB in
	// all): entries past their TTL are dropped at every store, and past the bound the
	// cache is emptied.
	configMapCacheMax = 1024
	// configMapCacheBytes is the largest ConfigMap kept: one a credential configuration can
	// be (credentials' 16 KiB and its key). A larger one is refused anyway, and read again
	// at each admission that names it, so that no tenant can fill the webhook's memory.
	configMapCacheBytes = 16<<10 + 256
)

// ConfigMaps reads the credential ConfigMap a pod names
// (contract.AnnotationCredentialConfigMap).
type ConfigMaps interface {
	// ConfigMap returns the ConfigMap, or an error that apierrors.IsNotFound recognises
	// when there is none (ErrNotAudited: it cannot be known).
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// ErrNotAudited is a ConfigMaps' answer for a ConfigMap it cannot know (an audit of
// manifests that do not include it): the pod is judged without it, with a warning.
var ErrNotAudited = errors.New("not among the objects audited")

// KubeConfigMaps is the ConfigMaps of a live cluster (RBAC: get on configmaps): one GET per
// namespace and name per configMapCacheTTL, shared by the admissions that ask meanwhile. A
// cache of every ConfigMap of the cluster (an informer) would cost the webhook far more
// memory than these reads cost the API server.
type KubeConfigMaps struct {
	client kubernetes.Interface
	group  singleflight.Group
	mu     sync.Mutex
	cache  map[string]cachedConfigMap
	now    func() time.Time
}

type cachedConfigMap struct {
	cm *corev1.ConfigMap // its data alone
	at time.Time
}

// NewKubeConfigMaps is the ConfigMaps of the cluster client talks to.
func NewKubeConfigMaps(client kubernetes.Interface) *KubeConfigMaps {
	return &KubeConfigMaps{client: client, cache: map[string]cachedConfigMap{}, now: time.Now}
}

// ConfigMap implements ConfigMaps.
func (k *KubeConfigMaps) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	key := namespace + "/" + name
	k.mu.Lock()
	if c, ok := k.cache[key]; ok && k.now().Sub(c.at) < configMapCacheTTL {
		k.mu.Unlock()
		return c.cm, nil
	}
	k.mu.Unlock()
	ch := k.group.DoChan(key, func() (any, error) {
		// Not the first caller's context: its cancellation must not fail the others.
		rctx, cancel := context.WithTimeout(context.Background(), configMapLookupTimeout)
		defer cancel()
		cm, err := k.client.CoreV1().ConfigMaps(namespace).Get(rctx, name, metav1.GetOptions{})
		if err != nil {
			// A NotFound is not kept: a ConfigMap made right after ("create it first") is
			// read at the next admission.
			return nil, err
		}
		data := &corev1.ConfigMap{Data: cm.Data, BinaryData: cm.BinaryData}
		if size := configMapSize(data); size <= configMapCacheBytes {
			k.store(key, cachedConfigMap{cm: data, at: k.now()})
		}
		return data, nil
	})
	select {
	case r := <-ch:
		cm, _ := r.Val.(*corev1.ConfigMap)
		return cm, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (k *KubeConfigMaps) store(key string, c cachedConfigMap) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, old := range k.cache {
		if c.at.Sub(old.at) >= configMapCacheTTL {
			delete(k.cache, key)
		}
	}
	if len(k.cache) >= configMapCacheMax {
		clear(k.cache)
	}
	k.cache[key] = c
}

// configMapSize is the bytes of a ConfigMap's keys and values.
func configMapSize(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	for k, v := range cm.BinaryData {
		n += len(k) + len(v)
	}
	return n
}

// reservedSidecarPaths are the sidecar's own mounts, under which a credential ConfigMap's
// token may not be projected.
var reservedSidecarPaths = []string{contract.TmpMountPath, contract.BufferMountPath, contract.CacheMountPath}

// credentialConfigMap is a pod's checked credential ConfigMap.
type credentialConfigMap struct {
	name, annotation string
	conf             credentials.CredentialConfig
}

// credentialAnnotation is the name the pod gave its credential ConfigMap under: ours, else
// the GKE driver's, for messages that name what the user wrote.
func credentialAnnotation(raw map[string]string) string {
	if _, ok := raw[contract.AnnotationCredentialConfigMap]; ok {
		return contract.AnnotationCredentialConfigMap
	}
	return incumbentPrefix + "workload-identity-credential-configmap"
}

// checkCredentialConfigMapUse refuses the annotation where the sidecar cannot honour it:
// the pod's volumes of the driver that the node's shared mounter serves read as the
// mounter's identity, not the ConfigMap's (credentialConfigMap refuses the other cases: a
// node plugin that federates every volume, a lent image). Either would change the identity
// the pod asked for without a word.
func (m *Mutator) checkCredentialConfigMapUse(raw, ann map[string]string, u usage) error {
	name, ok := ann[contract.AnnotationCredentialConfigMap]
	if !ok {
		return nil
	}
	key := credentialAnnotation(raw)
	switch {
	case len(u.shared) > 0:
		return badRequest("annotation %s: volume %s has %s: %s, and the node's shared mounter that serves it does not read the pod's credential ConfigMap %q: give the volume an identity of its own (%s on the volume, or a nodePublishSecretRef), or leave %s out",
			key, u.shared[0], contract.AttrMountMode, contract.MountModeShared, name, contract.AttrWorkloadIdentityProvider, contract.AttrMountMode)
	}
	return nil
}

// readsWithADC reports whether a volume of the sidecar may read with Application Default
// Credentials, which the credential ConfigMap replaces: an inline volume with no Secret and
// no provider, or a claim's (its PersistentVolume's Secret is not known here). A bad
// identity attribute counts as one: the node plugin refuses it, with its own message.
func readsWithADC(pod *corev1.Pod, ours driverVolumes) bool {
	for _, name := range slices.Sorted(maps.Keys(ours)) {
		c, inline, err := volumeIdentity(pod, name, ours[name])
		if !inline || err != nil || c.Kind == credentials.KindADC {
			return true
		}
	}
	return false
}

// volumeIdentity is the identity the node plugin chooses for the pod's volume name of the
// driver (attrs, resolved): with the volume's Secret when it is inline, and whether it is;
// a claim's PersistentVolume's Secret is not known here, so its choice is without one.
func volumeIdentity(pod *corev1.Pod, name string, attrs map[string]string) (credentials.Choice, bool, error) {
	i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name && v.CSI != nil })
	hasKey := i >= 0 && pod.Spec.Volumes[i].CSI.NodePublishSecretRef != nil
	c, err := credentials.Choose(credentials.Config{}, attrs, hasKey)
	return c, i >= 0, err
}

// credentialConfigMap reads and checks the ConfigMap the pod names (nil without the
// annotation, and with a warning when no volume of the sidecar would read with it). Where
// the sidecar could not honour it, the pod is refused: a node plugin that federates every
// volume (NodeFederated) gives each its own exchange, which gcsfuse uses instead, and a
// sidecar image the pod lends may not know the configuration (an older one reads with
// Application Default Credentials). A
// ConfigMap that is missing or wrong is the pod's mistake (400); one that cannot be read
// refuses the pod too (500): admitted without it, its sidecar would read as someone else
// than the pod asked.
func (m *Mutator) credentialConfigMap(ctx context.Context, pod *corev1.Pod, namespace string, ann map[string]string, ours driverVolumes, lent bool, lentName string) (*credentialConfigMap, []string, error) {
	name, ok := ann[contract.AnnotationCredentialConfigMap]
	if !ok {
		return nil, nil, nil
	}
	key := credentialAnnotation(pod.Annotations)
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return nil, nil, badAnnotation(key, name, "not a ConfigMap name")
	}
	if !readsWithADC(pod, ours) {
		return nil, []string{fmt.Sprintf("annotation %s: every volume of the driver in the pod has an identity of its own (a nodePublishSecretRef or a federation provider), so the credential ConfigMap %s is not used", key, name)}, nil
	}
	if m.cfg.NodeFederated {
		return nil, nil, badRequest("annotation %s: the node plugin federates every volume without an identity of its own (--wif-provider, the chart's node.wifProvider), which gcsfuse then uses instead of the credential ConfigMap %q: name the ConfigMap's audience as the volumes' %s instead (and its service account as %s), or leave the annotation out",
			key, name, contract.AttrWorkloadIdentityProvider, contract.AttrServiceAccount)
	}
	if lent {
		return nil, nil, badRequest("annotation %s: the pod lends the sidecar's image through its container %s, and an image other than the webhook's may not read the credential configuration (an older sidecar would read with Application Default Credentials instead, as someone else than the pod asked): remove that container, or the annotation", key, lentName)
	}
	if m.cfg.ConfigMaps == nil {
		return nil, nil, badRequest("annotation %s: this webhook does not read credential ConfigMaps (the chart's webhook.credentialConfigMaps is false): give the volumes %s instead, or ask a cluster admin to turn it on", key, contract.AttrWorkloadIdentityProvider)
	}
	lctx, cancel := context.WithTimeout(ctx, configMapLookupTimeout)
	defer cancel()
	cm, err := m.cfg.ConfigMaps.ConfigMap(lctx, namespace, name)
	switch {
	case errors.Is(err, ErrNotAudited):
		return nil, []string{fmt.Sprintf("annotation %s: ConfigMap %s/%s is %v: its content was not checked", key, namespace, name, err)}, nil
	case apierrors.IsNotFound(err):
		return nil, nil, badRequest("annotation %s: ConfigMap %s not found in namespace %s: create it first (kubectl create configmap %s --from-file=credential-configuration.json -n %s)",
			key, name, namespace, name, namespace)
	case err != nil:
		return nil, nil, fmt.Errorf("read the credential ConfigMap %s/%s: %w", namespace, name, err)
	}
	conf, err := credentials.ParseCredentialConfigMap(name, cm.Data, cm.BinaryData,
		credentials.CredentialRules{Reserved: reservedSidecarPaths, TokenURLs: m.cfg.CredentialTokenURLs})
	if err != nil {
		return nil, nil, badRequest("annotation %s: %v", key, err)
	}
	return &credentialConfigMap{name: name, annotation: key, conf: conf}, nil, nil
}

// apply adds the token's volume to newVolumes and gives the sidecar its mount and the
// configuration as checked. A pod that already has a volume of that name is refused: it
// would be mistaken for the webhook's.
func (c *credentialConfigMap) apply(pod *corev1.Pod, newVolumes []corev1.Volume, sidecar *corev1.Container) ([]corev1.Volume, error) {
	for _, v := range pod.Spec.Volumes {
		if v.Name == contract.CredentialTokenVolumeName {
			return nil, badRequest("annotation %s: the pod already has a volume named %s, which the webhook adds for the credential ConfigMap: rename it", c.annotation, v.Name)
		}
	}
	seconds := int64(credentials.CredentialConfigTokenSeconds)
	mode := int32(0o444)
	newVolumes = append(newVolumes,
		corev1.Volume{Name: contract.CredentialTokenVolumeName, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: &mode,
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: c.conf.TokenAudience, ExpirationSeconds: &seconds, Path: c.conf.TokenFile()}}},
		}}},
	)
	sidecar.VolumeMounts = append(sidecar.VolumeMounts,
		corev1.VolumeMount{Name: contract.CredentialTokenVolumeName, MountPath: c.conf.TokenDir(), ReadOnly: true})
	sidecar.Env = append(sidecar.Env,
		corev1.EnvVar{Name: contract.EnvCredentialConfig, Value: string(c.conf.JSON)},
		corev1.EnvVar{Name: contract.EnvCredentialConfigMap, Value: c.name},
	)
	return newVolumes, nil
}
