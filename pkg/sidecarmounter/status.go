package sidecarmounter

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
)

// onStatus turns the sidecar's reports into logs, Events and, for StateTerminating, the
// OnTerminating hook. A state this build does not know is logged and ignored: a newer
// sidecar may report more than this node plugin understands.
func (m *Mounter) onStatus(pod nodevolume.PodRef, vol handoff.Volume, st *handoff.Status, log *slog.Logger) {
	log = log.With("state", st.State, "ms", st.ElapsedMillis)
	volume := vol.VolumeName
	switch st.State {
	case handoff.StateStarted:
		log.Info("gcsfuse serving")
		nodevolume.PodEventTo(m.cfg.Events, pod, false, contract.EventGcsfuseStarted, fmt.Sprintf("volume %s: gcsfuse serving after %d ms", volume, st.ElapsedMillis))
	case handoff.StateFailed:
		log.Error("gcsfuse failed to start", "message", st.Message)
		who := ""
		if vol.Identity != "" {
			who = ", identity " + vol.Identity
		}
		nodevolume.PodEventTo(m.cfg.Events, pod, true, contract.EventGcsfuseFailed, fmt.Sprintf("volume %s (bucket %s%s): gcsfuse failed to start: %s", volume, vol.Bucket, who, st.Message))
	case handoff.StateExited:
		log.Warn("gcsfuse exited", "message", st.Message)
		msg := st.Message
		if !strings.HasPrefix(msg, "volume "+volume+" ") {
			// An older sidecar's message does not name the volume.
			msg = fmt.Sprintf("volume %s: %s", volume, msg)
		}
		nodevolume.PodEventTo(m.cfg.Events, pod, true, contract.EventGcsfuseExited, msg)
	case handoff.StateRefused:
		log.Error("sidecar refused the volume", "message", st.Message)
		nodevolume.PodEventTo(m.cfg.Events, pod, true, contract.EventHandoffRefused,
			fmt.Sprintf("volume %s (bucket %s): %s refused the volume: %s%s", volume, vol.Bucket, contract.SidecarContainerName, st.Message, refusedHint(vol, st.Message)))
	case handoff.StateTerminating:
		log.Info("sidecar draining: the pod is stopping while containers may use the volume", "message", st.Message)
		first := true
		if m.cfg.OnTerminating != nil && pod.UID != "" {
			first = m.cfg.OnTerminating(pod)
		}
		if first {
			nodevolume.PodEventTo(m.cfg.Events, pod, false, contract.EventSidecarDraining,
				fmt.Sprintf("%s keeps serving the volumes until the containers that use them have exited", contract.SidecarContainerName))
		}
	case handoff.StateStopping:
		log.Debug("sidecar stopping gcsfuse", "message", st.Message)
	default:
		log.Debug("sidecar status of a state this node plugin does not know; ignored", "message", st.Message)
	}
}

// refusedHint explains a refusal of a version-2 volume by a sidecar that reads only
// version 1 (a pod started before the driver's upgrade): its message names a field it does
// not know, not the cause.
func refusedHint(vol handoff.Volume, msg string) string {
	if vol.Version <= handoff.Version || !strings.Contains(msg, "unknown field") && !strings.Contains(msg, "unsupported hand-off version") {
		return ""
	}
	return fmt.Sprintf(" (the driver gives gcsfuse a proxy or CA bundle, which needs hand-off version %d; this pod's sidecar predates it: recreate the pod to get the current sidecar)", vol.Version)
}
