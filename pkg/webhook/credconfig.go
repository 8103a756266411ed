package webhook

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
)

// configMapLookupTimeout bounds the read of a pod's credential ConfigMap, well inside the
// webhook's 10 s timeout.
const configMapLookupTimeout = 3 * time.Second

// ConfigMaps reads the credential ConfigMap a pod names
// (contract.AnnotationCredentialConfigMap).
type ConfigMaps interface {
	// ConfigMap returns the ConfigMap, or an error that apierrors.IsNotFound recognises
	// when there is none.
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// KubeConfigMaps is the ConfigMaps of a live cluster (RBAC: get on configmaps). One GET per
// admission of a pod with the annotation, none for the others: a cache of every ConfigMap
// of the cluster would cost the webhook far more memory than these reads cost the API
// server.
type KubeConfigMaps struct{ Client kubernetes.Interface }

// ConfigMap implements ConfigMaps.
func (k KubeConfigMaps) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return k.Client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

// reservedSidecarPaths are the sidecar's own mounts, under which a credential ConfigMap's
// token may not be projected.
var reservedSidecarPaths = []string{contract.TmpMountPath, contract.BufferMountPath, contract.CacheMountPath, contract.CredentialConfigMountPath}

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
// mounter's identity, not the ConfigMap's, and a node plugin that federates every volume
// (NodeFederated) gives each its own token exchange, which gcsfuse uses instead. Either
// would change the identity the pod asked for without a word.
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
	case m.cfg.NodeFederated:
		return badRequest("annotation %s: the node plugin federates every volume without an identity of its own (--wif-provider, the chart's node.wifProvider), which gcsfuse then uses instead of the credential ConfigMap %q: name the ConfigMap's audience as the volumes' %s instead (and its service account as %s), or leave the annotation out",
			key, name, contract.AttrWorkloadIdentityProvider, contract.AttrServiceAccount)
	}
	return nil
}

// credentialConfigMap reads and checks the ConfigMap the pod names (nil without the
// annotation). A ConfigMap that is missing or wrong is the pod's mistake (400); one that
// cannot be read refuses the pod too (500): admitted without it, its sidecar would read as
// someone else than the pod asked.
func (m *Mutator) credentialConfigMap(ctx context.Context, namespace string, raw, ann map[string]string) (*credentialConfigMap, error) {
	name, ok := ann[contract.AnnotationCredentialConfigMap]
	if !ok {
		return nil, nil
	}
	key := credentialAnnotation(raw)
	if !validConfigMapName(name) {
		return nil, badAnnotation(key, name, "not a ConfigMap name")
	}
	if m.cfg.ConfigMaps == nil {
		return nil, errors.New("this webhook reads no ConfigMap (no ConfigMaps configured)")
	}
	ctx, cancel := context.WithTimeout(ctx, configMapLookupTimeout)
	defer cancel()
	cm, err := m.cfg.ConfigMaps.ConfigMap(ctx, namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, badRequest("annotation %s: ConfigMap %s not found in namespace %s: create it first (kubectl create configmap %s --from-file=credential-configuration.json -n %s)",
			key, name, namespace, name, namespace)
	case err != nil:
		return nil, fmt.Errorf("read the credential ConfigMap %s/%s: %w", namespace, name, err)
	}
	conf, err := credentials.ParseCredentialConfigMap(name, cm.Data, cm.BinaryData, reservedSidecarPaths)
	if err != nil {
		return nil, badRequest("annotation %s: %v", key, err)
	}
	return &credentialConfigMap{name: name, annotation: key, conf: conf}, nil
}

// validConfigMapName reports whether name can name a ConfigMap (a DNS subdomain).
func validConfigMapName(name string) bool {
	return len(validation.IsDNS1123Subdomain(name)) == 0
}

// apply adds the ConfigMap's volumes to newVolumes and gives the sidecar their mounts and
// the configuration's path. A pod that already has volumes of those names is refused: they
// would be mistaken for the webhook's.
func (c *credentialConfigMap) apply(pod *corev1.Pod, newVolumes []corev1.Volume, sidecar *corev1.Container) ([]corev1.Volume, error) {
	for _, v := range pod.Spec.Volumes {
		if v.Name == contract.CredentialTokenVolumeName || v.Name == contract.CredentialConfigVolumeName {
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
		corev1.Volume{Name: contract.CredentialConfigVolumeName, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: c.name}, DefaultMode: &mode,
			Items: []corev1.KeyToPath{{Key: c.conf.Key, Path: c.conf.Key}},
		}}},
	)
	sidecar.VolumeMounts = append(sidecar.VolumeMounts,
		corev1.VolumeMount{Name: contract.CredentialTokenVolumeName, MountPath: c.conf.TokenDir(), ReadOnly: true},
		corev1.VolumeMount{Name: contract.CredentialConfigVolumeName, MountPath: contract.CredentialConfigMountPath, ReadOnly: true},
	)
	sidecar.Env = append(sidecar.Env,
		corev1.EnvVar{Name: contract.EnvCredentialConfig, Value: path.Join(contract.CredentialConfigMountPath, c.conf.Key)},
		corev1.EnvVar{Name: contract.EnvCredentialConfigMap, Value: c.name},
	)
	return newVolumes, nil
}
