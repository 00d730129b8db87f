/*
 * kube-lite's protobuf encoding, table-driven:
 *   - one object of every served built-in kind (and the lists, Status,
 *     DeleteOptions, TokenRequest) goes JSON -> protobuf -> JSON: every
 *     member written comes back with its value, the second encoding is the
 *     same bytes, and the Go-shaped defaults kube-apiserver would write
 *     (non-pointer structs, plain zero scalars, nulls) are there;
 *   - exact bytes of small messages, worked out by hand from the field
 *     numbers in Kubernetes' generated.proto (k8s.io/api v0.36.3 and 1.20.2)
 *     and the generated marshallers' rules (non-pointer fields always
 *     written, pointers when set, maps sorted, int32 sign-extended);
 *   - every served kind has tables.
 * Hostile bytes, Accept negotiation and value formats are in
 * test_kl_proto_wire.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* ---- helpers ---------------------------------------------------------------------------- */

/* The table's JSON with ' turned into ". */
static json_object *parse(const char *name, const char *text)
{
    char *s = strdup(text);
    assert_non_null(s);
    for (char *c = s; *c; c++)
        if (*c == '\'')
            *c = '"';
    json_object *o = kobj_parse_text(s, strlen(s));
    if (!o)
        fail_msg("[%s] bad JSON in the table (%s): %s", name, util_err_last(), s);
    free(s);
    return o;
}

static char *text_of(const json_object *o)
{
    return kobj_to_text(o, NULL);
}

/* Puts `seg` in front of the path in `where`. */
static void prepend(char *where, size_t cap, const char *seg)
{
    char tmp[512];
    int n = snprintf(tmp, sizeof(tmp), "%s%s", seg, where);
    if (n > 0 && (size_t)n < cap && (size_t)n < sizeof(tmp))
        memcpy(where, tmp, (size_t)n + 1);
}

/* Every member of `x` is in `y` with the same value (arrays item by item):
 * what was written survives. The first path that differs goes into `where`. */
static bool subset(const json_object *x, const json_object *y, char *where, size_t cap)
{
    where[0] = '\0';
    if (json_object_is_type(x, json_type_object)) {
        if (!json_object_is_type(y, json_type_object))
            return false;
        json_object_object_foreach((json_object *)x, k, v)
        {
            json_object *w = NULL;
            if (!json_object_object_get_ex(y, k, &w) || !subset(v, w, where, cap)) {
                if (!json_object_object_get_ex(y, k, NULL))
                    where[0] = '\0';
                prepend(where, cap, k);
                prepend(where, cap, ".");
                return false;
            }
        }
        return true;
    }
    if (json_object_is_type(x, json_type_array)) {
        size_t n = kobj_len(x);
        if (!json_object_is_type(y, json_type_array) || kobj_len(y) != n)
            return false;
        for (size_t i = 0; i < n; i++) {
            if (!subset(json_object_array_get_idx(x, i), json_object_array_get_idx(y, i), where,
                        cap)) {
                char idx[32];
                snprintf(idx, sizeof(idx), "[%zu]", i);
                prepend(where, cap, idx);
                return false;
            }
        }
        return true;
    }
    return json_object_equal((json_object *)x, (json_object *)y) != 0;
}

/* "a/b/0/c" from `o`; NULL when absent or null. */
static json_object *at(json_object *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL;
    for (char *seg = strtok_r(buf, "/", &save); seg && o; seg = strtok_r(NULL, "/", &save)) {
        if (json_object_is_type(o, json_type_array))
            o = json_object_array_get_idx(o, (size_t)strtoul(seg, NULL, 10));
        else
            o = kobj_get(o, seg);
    }
    return o;
}

static bool has(json_object *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    char *slash = strrchr(buf, '/');
    json_object *parent = slash ? (*slash = '\0', at(o, buf)) : o;
    const char *last = slash ? slash + 1 : buf;
    if (json_object_is_type(parent, json_type_array))
        return strtoul(last, NULL, 10) < kobj_len(parent);
    return json_object_object_get_ex(parent, last, NULL);
}

static void assert_hex(const char *what, const char *p, size_t len, const char *want)
{
    char *got = calloc(len * 2 + 1, 1);
    assert_non_null(got);
    for (size_t i = 0; i < len; i++)
        snprintf(got + 2 * i, 3, "%02x", (unsigned char)p[i]);
    if (strcmp(got, want) != 0)
        fail_msg("%s:\n got  %s\n want %s", what, got, want);
    free(got);
}

/* ---- round trips --------------------------------------------------------------------------- */

/* A member the decoding must have set: the path and its JSON, or NULL for
 * "absent" (left out, as omitempty does). */
typedef struct expect {
    const char *path;
    const char *json;
} expect;

typedef struct trip {
    const char *name;
    const char *json; /* with apiVersion and kind */
    expect want[6];
} trip;

/* Placeholders in the rows: $M and $N are the metadata of a cluster-scoped
 * and of a namespaced object, $P a PodSpec with the volume kinds and
 * container details the sidecars' pods use. */
static const char meta_cluster[] =
    "{'name':'x','uid':'u-1','resourceVersion':'7','creationTimestamp':'2024-05-06T07:08:09Z'}";
static const char meta_ns[] =
    "{'name':'x','namespace':'ns','uid':'u-2','resourceVersion':'8','generation':3,"
    "'creationTimestamp':'2024-05-06T07:08:09Z','labels':{'b':'2','a':'1'},'annotations':"
    "{'x/y':'z'},'finalizers':['f1','f2'],'ownerReferences':[{'apiVersion':'v1','kind':'Pod',"
    "'name':'p','uid':'u-3','controller':true,'blockOwnerDeletion':false}]}";
static const char pod_spec[] =
    "{'volumes':[{'name':'data','persistentVolumeClaim':{'claimName':'c','readOnly':true}},"
    "{'name':'sec','secret':{'secretName':'s','items':[{'key':'k','path':'p','mode':256}],"
    "'defaultMode':420}},{'name':'tmp','emptyDir':{'medium':'Memory','sizeLimit':'64Mi'}},"
    "{'name':'inline','csi':{'driver':'d.example.com','readOnly':false,'fsType':'ext4',"
    "'volumeAttributes':{'a':'b'},'nodePublishSecretRef':{'name':'ns'}}},{'name':'tok',"
    "'projected':{'sources':[{'serviceAccountToken':{'audience':'api','expirationSeconds':3600,"
    "'path':'token'}}],'defaultMode':420}},{'name':'host','hostPath':{'path':'/var','type':"
    "'Directory'}}],'containers':[{'name':'app','image':'busybox','command':['sh','-c'],"
    "'ports':[{'name':'http','containerPort':8080,'protocol':'TCP'}],'env':[{'name':'NODE',"
    "'valueFrom':{'fieldRef':{'apiVersion':'v1','fieldPath':'spec.nodeName'}}}],'resources':"
    "{'limits':{'memory':'128Mi'},'requests':{'cpu':'100m'}},'volumeMounts':[{'name':'data',"
    "'mountPath':'/data','mountPropagation':'HostToContainer'}],'livenessProbe':{'httpGet':"
    "{'path':'/healthz','port':'http','scheme':'HTTP'},'initialDelaySeconds':5,"
    "'timeoutSeconds':1,'periodSeconds':10,'successThreshold':1,'failureThreshold':3},"
    "'readinessProbe':{'tcpSocket':{'port':8080},'timeoutSeconds':1,'periodSeconds':10,"
    "'successThreshold':1,'failureThreshold':3},'terminationMessagePath':'/dev/termination-log',"
    "'imagePullPolicy':'IfNotPresent','securityContext':{'privileged':true,'runAsUser':0}}],"
    "'restartPolicy':'Always','terminationGracePeriodSeconds':30,'dnsPolicy':'ClusterFirst',"
    "'nodeSelector':{'kubernetes.io/os':'linux'},'serviceAccountName':'sa','nodeName':'node-1',"
    "'securityContext':{'supplementalGroups':[1,2],'fsGroup':2000},'schedulerName':"
    "'default-scheduler','tolerations':[{'key':'k','operator':'Exists','effect':'NoExecute',"
    "'tolerationSeconds':300}],'priority':0,'enableServiceLinks':true}";

static const trip trips[] = {
    {"Namespace",
     "{'kind':'Namespace','apiVersion':'v1','metadata':$M,'spec':{'finalizers':['kubernetes']},"
     "'status':{'phase':'Active'}}",
     {{"metadata/namespace", NULL}, {"status/conditions", NULL}}},
    {"Node",
     "{'kind':'Node','apiVersion':'v1','metadata':$M,'spec':{'podCIDR':'10.0.0.0/24','taints':"
     "[{'key':'k','value':'v','effect':'NoSchedule','timeAdded':'2024-01-01T00:00:00Z'}]},"
     "'status':{'capacity':{'cpu':'4','memory':'8Gi'},'allocatable':{'cpu':'3900m'},"
     "'conditions':[{'type':'Ready','status':'True','lastHeartbeatTime':'2024-01-01T00:00:00Z',"
     "'lastTransitionTime':'2024-01-01T00:00:00Z','reason':'KubeletReady','message':'ok'}],"
     "'addresses':[{'type':'InternalIP','address':'10.0.0.1'}],'daemonEndpoints':"
     "{'kubeletEndpoint':{'Port':10250}},'nodeInfo':{'machineID':'m','systemUUID':'s','bootID':"
     "'b','kernelVersion':'6','osImage':'o','containerRuntimeVersion':'c','kubeletVersion':"
     "'v1.32.0','kubeProxyVersion':'','operatingSystem':'linux','architecture':'amd64'}}}",
     {{"spec/unschedulable", NULL}, {"status/daemonEndpoints/kubeletEndpoint/Port", "10250"}}},
    {"PersistentVolume spec.csi and nodeAffinity",
     "{'kind':'PersistentVolume','apiVersion':'v1','metadata':$M,'spec':{'capacity':"
     "{'storage':'5Gi'},'csi':{'driver':'hostpath.csi.k8s.io','volumeHandle':'h-1','readOnly':"
     "true,'fsType':'xfs','volumeAttributes':{'storage.kubernetes.io/csiProvisionerIdentity':"
     "'1-2-3'},'nodePublishSecretRef':{'name':'s','namespace':'n'},'controllerExpandSecretRef':"
     "{'name':'e','namespace':'n'}},'accessModes':['ReadWriteOnce','ReadOnlyMany'],'claimRef':"
     "{'kind':'PersistentVolumeClaim','namespace':'ns','name':'c','uid':'u','apiVersion':'v1',"
     "'resourceVersion':'5'},'persistentVolumeReclaimPolicy':'Delete','storageClassName':'fast',"
     "'mountOptions':['ro','noatime'],'volumeMode':'Filesystem','nodeAffinity':{'required':"
     "{'nodeSelectorTerms':[{'matchExpressions':[{'key':'topology.kubernetes.io/zone',"
     "'operator':'In','values':['zone-1']}]}]}}},'status':{'phase':'Bound',"
     "'lastPhaseTransitionTime':'2024-01-01T00:00:01Z'}}",
     {{"spec/csi/driver", "\"hostpath.csi.k8s.io\""},
      {"spec/nodeAffinity/required/nodeSelectorTerms/0/matchExpressions/0/values/0",
       "\"zone-1\""}}},
    {"PersistentVolumeClaim",
     "{'kind':'PersistentVolumeClaim','apiVersion':'v1','metadata':$N,'spec':{'accessModes':"
     "['ReadWriteOnce'],'resources':{'requests':{'storage':'1Gi'},'limits':{'storage':'2Gi'}},"
     "'volumeName':'pv-1','storageClassName':'','volumeMode':'Block','dataSource':{'apiGroup':"
     "'snapshot.storage.k8s.io','kind':'VolumeSnapshot','name':'snap'},'selector':"
     "{'matchLabels':{'a':'b'}}},'status':{'phase':'Bound','accessModes':['ReadWriteOnce'],"
     "'capacity':{'storage':'1Gi'},'conditions':[{'type':'Resizing','status':'True',"
     "'lastProbeTime':null,'lastTransitionTime':'2024-01-01T00:00:00Z'}]}}",
     /* storageClassName "" is a set pointer: kept (DefaultStorageClass reads it) */
     {{"spec/storageClassName", "\"\""}, {"status/conditions/0/lastProbeTime", "null"}}},
    {"Pod spec.volumes and containers",
     "{'kind':'Pod','apiVersion':'v1','metadata':$N,'spec':$P,'status':{'phase':'Running',"
     "'conditions':[{'type':'Ready','status':'True','lastProbeTime':null,"
     "'lastTransitionTime':'2024-01-01T00:00:00Z'}],'hostIP':'10.0.0.1','podIP':'10.1.0.5',"
     "'podIPs':[{'ip':'10.1.0.5'}],'startTime':'2024-01-01T00:00:00Z','containerStatuses':"
     "[{'name':'app','state':{'running':{'startedAt':'2024-01-01T00:00:02Z'}},'lastState':{},"
     "'ready':true,'restartCount':0,'image':'busybox','imageID':'sha256:1','containerID':"
     "'cri://1','started':true}],'qosClass':'Burstable'}}",
     {{"spec/containers/0/livenessProbe/httpGet/port", "\"http\""},
      {"spec/containers/0/readinessProbe/tcpSocket/port", "8080"},
      {"spec/volumes/0/persistentVolumeClaim/claimName", "\"c\""},
      {"spec/volumes/2/emptyDir/sizeLimit", "\"64Mi\""},
      {"spec/securityContext/supplementalGroups/1", "2"}}},
    {"Secret bytes",
     "{'kind':'Secret','apiVersion':'v1','metadata':$N,'immutable':false,'data':{'bin':'AAH/',"
     "'empty':'','text':'aGVsbG8='},'type':'Opaque'}",
     {{"data/bin", "\"AAH/\""}, {"stringData", NULL}}},
    {"ConfigMap",
     "{'kind':'ConfigMap','apiVersion':'v1','metadata':$N,'data':{'a':'1','b':''},"
     "'binaryData':{'z':'AA=='}}",
     {{"immutable", NULL}}},
    {"Event (core)",
     "{'kind':'Event','apiVersion':'v1','metadata':$N,'involvedObject':{'kind':"
     "'PersistentVolumeClaim','namespace':'ns','name':'c','uid':'u','apiVersion':'v1',"
     "'resourceVersion':'3'},'reason':'Provisioning','message':'External provisioner is "
     "provisioning','source':{'component':'csi'},'firstTimestamp':'2024-01-01T00:00:00Z',"
     "'lastTimestamp':'2024-01-01T00:00:05Z','count':2,'type':'Normal','eventTime':"
     "'2024-01-01T00:00:00.123456Z','series':{'count':2,'lastObservedTime':"
     "'2024-01-01T00:00:05.000001Z'},'action':'Provision','reportingComponent':'csi',"
     "'reportingInstance':'csi-1'}",
     {{"eventTime", "\"2024-01-01T00:00:00.123456Z\""}, {"related", NULL}}},
    {"ServiceAccount",
     "{'kind':'ServiceAccount','apiVersion':'v1','metadata':$N,'secrets':[{'name':'t'}],"
     "'imagePullSecrets':[{'name':'reg'}],'automountServiceAccountToken':false}",
     {{"automountServiceAccountToken", "false"}}},
    {"StorageClass",
     "{'kind':'StorageClass','apiVersion':'storage.k8s.io/v1','metadata':$M,'provisioner':"
     "'d.example.com','parameters':{'type':'ssd'},'reclaimPolicy':'Delete','mountOptions':"
     "['discard'],'allowVolumeExpansion':true,'volumeBindingMode':'WaitForFirstConsumer',"
     "'allowedTopologies':[{'matchLabelExpressions':[{'key':'zone','values':['a','b']}]}]}",
     {{"allowedTopologies/0/matchLabelExpressions/0/values/1", "\"b\""}}},
    {"VolumeAttachment status",
     "{'kind':'VolumeAttachment','apiVersion':'storage.k8s.io/v1','metadata':$M,'spec':"
     "{'attacher':'d.example.com','source':{'persistentVolumeName':'pv-1'},'nodeName':'node-1'},"
     "'status':{'attached':true,'attachmentMetadata':{'devicePath':'/dev/xvdb'},'attachError':"
     "{'time':'2024-01-01T00:00:00Z','message':'timed out','errorCode':4},'detachError':"
     "{'message':'busy'}}}",
     {{"status/attachError/errorCode", "4"}, {"status/detachError/time", "null"}}},
    {"CSINode",
     "{'kind':'CSINode','apiVersion':'storage.k8s.io/v1','metadata':$M,'spec':{'drivers':"
     "[{'name':'d.example.com','nodeID':'n-1','topologyKeys':['zone'],'allocatable':"
     "{'count':8}}]}}",
     {{"spec/drivers/0/allocatable/count", "8"}}},
    {"CSIDriver",
     "{'kind':'CSIDriver','apiVersion':'storage.k8s.io/v1','metadata':$M,'spec':"
     "{'attachRequired':true,'podInfoOnMount':false,'volumeLifecycleModes':['Persistent',"
     "'Ephemeral'],'storageCapacity':true,'fsGroupPolicy':'File','tokenRequests':[{'audience':"
     "'api','expirationSeconds':600}],'requiresRepublish':false,'seLinuxMount':true}}",
     {{"spec/tokenRequests/0/expirationSeconds", "600"}}},
    {"CSIStorageCapacity",
     "{'kind':'CSIStorageCapacity','apiVersion':'storage.k8s.io/v1','metadata':$N,"
     "'nodeTopology':{'matchLabels':{'zone':'zone-1'}},'storageClassName':'fast','capacity':"
     "'100Gi','maximumVolumeSize':'10Gi'}",
     {{"capacity", "\"100Gi\""}}},
    {"VolumeAttributesClass",
     "{'kind':'VolumeAttributesClass','apiVersion':'storage.k8s.io/v1','metadata':$M,"
     "'driverName':'d.example.com','parameters':{'iops':'3000'}}",
     {{"parameters/iops", "\"3000\""}}},
    {"Lease times",
     "{'kind':'Lease','apiVersion':'coordination.k8s.io/v1','metadata':$N,'spec':"
     "{'holderIdentity':'me','leaseDurationSeconds':15,'acquireTime':"
     "'2024-01-01T00:00:00.000000Z','renewTime':'2024-01-01T00:00:10.250000Z',"
     "'leaseTransitions':3}}",
     {{"spec/renewTime", "\"2024-01-01T00:00:10.250000Z\""}, {"spec/strategy", NULL}}},
    {"Event (events.k8s.io)",
     "{'kind':'Event','apiVersion':'events.k8s.io/v1','metadata':$N,'eventTime':"
     "'2024-01-01T00:00:00.000001Z','series':{'count':2,'lastObservedTime':"
     "'2024-01-01T00:00:01.000000Z'},'reportingController':'c','reportingInstance':'i',"
     "'action':'Attach','reason':'Attached','regarding':{'kind':'Pod','name':'p'},'note':'n',"
     "'type':'Normal','deprecatedSource':{'component':'c'},'deprecatedFirstTimestamp':"
     "'2024-01-01T00:00:00Z','deprecatedCount':1}",
     {{"deprecatedLastTimestamp", "null"}, {"related", NULL}}},
    {"Deployment IntOrString",
     "{'kind':'Deployment','apiVersion':'apps/v1','metadata':$N,'spec':{'replicas':2,"
     "'selector':{'matchLabels':{'app':'a'},'matchExpressions':[{'key':'tier','operator':"
     "'NotIn','values':['db']}]},'template':{'metadata':{'labels':{'app':'a'}},'spec':$P},"
     "'strategy':{'type':'RollingUpdate','rollingUpdate':{'maxUnavailable':1,'maxSurge':'25%'}},"
     "'revisionHistoryLimit':10,'progressDeadlineSeconds':600},'status':{'observedGeneration':3,"
     "'replicas':2,'readyReplicas':2,'conditions':[{'type':'Available','status':'True',"
     "'lastUpdateTime':'2024-01-01T00:00:00Z','lastTransitionTime':'2024-01-01T00:00:00Z',"
     "'reason':'MinimumReplicasAvailable','message':'ok'}]}}",
     {{"spec/strategy/rollingUpdate/maxSurge", "\"25%\""},
      {"spec/strategy/rollingUpdate/maxUnavailable", "1"}}},
    {"DaemonSet",
     "{'kind':'DaemonSet','apiVersion':'apps/v1','metadata':$N,'spec':{'selector':"
     "{'matchLabels':{'app':'a'}},'template':{'metadata':{'labels':{'app':'a'}},'spec':$P},"
     "'updateStrategy':{'type':'RollingUpdate','rollingUpdate':{'maxUnavailable':'10%',"
     "'maxSurge':0}}},'status':{'currentNumberScheduled':1,'numberMisscheduled':0,"
     "'desiredNumberScheduled':1,'numberReady':1}}",
     {{"spec/updateStrategy/rollingUpdate/maxSurge", "0"}}},
    {"StatefulSet volumeClaimTemplates",
     "{'kind':'StatefulSet','apiVersion':'apps/v1','metadata':$N,'spec':{'replicas':1,"
     "'selector':{'matchLabels':{'app':'a'}},'template':{'metadata':{'labels':{'app':'a'}},"
     "'spec':$P},'volumeClaimTemplates':[{'metadata':{'name':'data'},'spec':{'accessModes':"
     "['ReadWriteOnce'],'resources':{'requests':{'storage':'1Gi'}}},'status':{}}],"
     "'serviceName':'svc','podManagementPolicy':'Parallel'},'status':{'replicas':1,"
     "'availableReplicas':1}}",
     {{"spec/volumeClaimTemplates/0/spec/resources/requests/storage", "\"1Gi\""}}},
    {"ReplicaSet",
     "{'kind':'ReplicaSet','apiVersion':'apps/v1','metadata':$N,'spec':{'replicas':1,"
     "'minReadySeconds':5,'selector':{'matchLabels':{'app':'a'}}},'status':{'replicas':1,"
     "'fullyLabeledReplicas':1}}",
     {{"spec/template/spec/containers", "null"}}},
    {"Role",
     "{'kind':'Role','apiVersion':'rbac.authorization.k8s.io/v1','metadata':$N,'rules':"
     "[{'verbs':['get','list'],'apiGroups':[''],'resources':['pods','pods/status'],"
     "'resourceNames':['a']}]}",
     {{"rules/0/apiGroups/0", "\"\""}}},
    {"RoleBinding",
     "{'kind':'RoleBinding','apiVersion':'rbac.authorization.k8s.io/v1','metadata':$N,"
     "'subjects':[{'kind':'ServiceAccount','name':'sa','namespace':'ns'},{'kind':'User',"
     "'apiGroup':'rbac.authorization.k8s.io','name':'bob'}],'roleRef':{'apiGroup':"
     "'rbac.authorization.k8s.io','kind':'Role','name':'r'}}",
     {{"subjects/0/apiGroup", NULL}}},
    {"ClusterRole",
     "{'kind':'ClusterRole','apiVersion':'rbac.authorization.k8s.io/v1','metadata':$M,'rules':"
     "[{'verbs':['get'],'nonResourceURLs':['/healthz']}],'aggregationRule':"
     "{'clusterRoleSelectors':[{'matchLabels':{'agg':'true'}}]}}",
     {{"rules/0/apiGroups", NULL}}},
    {"ClusterRoleBinding",
     "{'kind':'ClusterRoleBinding','apiVersion':'rbac.authorization.k8s.io/v1','metadata':$M,"
     "'subjects':[{'kind':'Group','apiGroup':'rbac.authorization.k8s.io','name':'g'}],"
     "'roleRef':{'apiGroup':'rbac.authorization.k8s.io','kind':'ClusterRole','name':'cr'}}",
     {{"roleRef/name", "\"cr\""}}},
    {"TokenRequest",
     "{'kind':'TokenRequest','apiVersion':'authentication.k8s.io/v1','metadata':$N,'spec':"
     "{'audiences':['api'],'expirationSeconds':3600,'boundObjectRef':{'kind':'Pod','apiVersion':"
     "'v1','name':'p','uid':'u'}},'status':{'token':'t','expirationTimestamp':"
     "'2024-01-01T01:00:00Z'}}",
     {{"spec/boundObjectRef/apiVersion", "\"v1\""}}},
    {"PersistentVolumeList",
     "{'kind':'PersistentVolumeList','apiVersion':'v1','metadata':{'resourceVersion':'42',"
     "'continue':'abc','remainingItemCount':3},'items':[{'metadata':{'name':'a'},'spec':"
     "{'capacity':{'storage':'1Gi'}},'status':{'phase':'Available'}},{'metadata':{'name':'b'},"
     "'spec':{},'status':{}}]}",
     {{"items/1/metadata/name", "\"b\""}, {"items/0/kind", NULL}}},
    {"Status",
     "{'kind':'Status','apiVersion':'v1','metadata':{},'status':'Failure','message':"
     "'PersistentVolumeClaim \\'p\\' is invalid','reason':'Invalid','details':{'name':'p',"
     "'kind':'PersistentVolumeClaim','causes':[{'reason':'FieldValueRequired','message':"
     "'Required value','field':'spec.resources'}]},'code':422}",
     {{"details/causes/0/field", "\"spec.resources\""}, {"details/uid", NULL}}},
    {"DeleteOptions",
     "{'kind':'DeleteOptions','apiVersion':'meta.k8s.io/v1','gracePeriodSeconds':0,"
     "'preconditions':{'uid':'u','resourceVersion':'5'},'propagationPolicy':'Foreground',"
     "'dryRun':['All']}",
     {{"gracePeriodSeconds", "0"}, {"orphanDependents", NULL}}},
};

/* The row's JSON with the placeholders filled in (caller frees). */
static char *expand(const char *text)
{
    size_t cap = strlen(text) + 1, n = 0;
    for (const char *p = text; (p = strchr(p, '$')) != NULL; p++)
        cap += sizeof(pod_spec);
    char *out = calloc(cap, 1);
    assert_non_null(out);
    for (const char *p = text; *p; p++) {
        const char *fill = NULL;
        if (p[0] == '$')
            fill = p[1] == 'M' ? meta_cluster : p[1] == 'N' ? meta_ns : pod_spec;
        if (!fill) {
            out[n++] = *p;
            continue;
        }
        memcpy(out + n, fill, strlen(fill) + 1);
        n += strlen(fill);
        p++;
    }
    out[n] = '\0';
    return out;
}

static void round_trip(const trip *t)
{
    char *text = expand(t->json);
    json_object *x = parse(t->name, text);
    free(text);
    char *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    if (kl_proto_encode(x, &b1, &n1) != 0)
        fail_msg("[%s] encode: %s", t->name, util_err_last());
    json_object *y = NULL, *z = NULL;
    if (kl_proto_decode(b1, n1, NULL, NULL, &y) != 0)
        fail_msg("[%s] decode: %s", t->name, util_err_last());
    char where[512] = "";
    if (!subset(x, y, where, sizeof(where))) {
        char *ty = text_of(y);
        fail_msg("[%s] %s did not come back:\n%s", t->name, where, ty);
    }
    /* What came back is the Go struct's JSON: encoding it again gives the
     * same bytes, and decoding those the same JSON. */
    assert_int_equal(kl_proto_encode(y, &b2, &n2), 0);
    if (n1 != n2 || memcmp(b1, b2, n1) != 0)
        fail_msg("[%s] the second encoding differs (%zu vs %zu bytes)", t->name, n1, n2);
    assert_int_equal(kl_proto_decode(b2, n2, NULL, NULL, &z), 0);
    assert_true(json_object_equal(y, z));
    for (size_t i = 0; i < N_ROWS(t->want) && t->want[i].path; i++) {
        const expect *e = &t->want[i];
        if (!e->json) {
            if (has(y, e->path))
                fail_msg("[%s] %s should be left out", t->name, e->path);
            continue;
        }
        if (!has(y, e->path))
            fail_msg("[%s] %s is missing", t->name, e->path);
        char *got = text_of(at(y, e->path));
        if (strcmp(got, e->json) != 0)
            fail_msg("[%s] %s: got %s, want %s", t->name, e->path, got, e->json);
        free(got);
    }
    json_object_put(x);
    json_object_put(y);
    json_object_put(z);
    free(b1);
    free(b2);
}

static void test_every_served_kind_round_trips_json_proto_json(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(trips); i++)
        round_trip(&trips[i]);
}

static void test_every_builtin_type_and_its_list_has_tables(void **state)
{
    (void)state;
    size_t n = 0;
    const kl_type *types = kl_types(&n);
    for (size_t i = 0; i < n; i++) {
        const kl_type *t = &types[i];
        const char *apiv = kl_type_api_version(t);
        /* CustomResourceDefinitions stay JSON: no tables are generated for
         * apiextensions.k8s.io (its clients default to JSON). */
        bool want = !t->custom && strcmp(t->group, "apiextensions.k8s.io") != 0;
        if (kl_proto_known(apiv, t->kind) != want || kl_proto_known(apiv, t->list_kind) != want)
            fail_msg("%s %s: tables %s", apiv, t->kind, want ? "missing" : "for a custom type");
    }
    /* The generated tables hold together: fields by rising number, the
     * declaration order a permutation, message references in range. */
    for (size_t m = 0; m < kl_pb_n_msgs; m++) {
        const kl_pb_msg *msg = &kl_pb_msgs[m];
        bool seen[256] = {false};
        for (size_t i = 0; i < msg->n; i++) {
            const kl_pb_field *f = &kl_pb_fields[msg->first + i];
            if (i > 0 && f->num <= kl_pb_fields[msg->first + i - 1].num)
                fail_msg("%s: fields out of order at %u", msg->name, f->num);
            if (f->kind == KL_PB_MSG && f->msg >= kl_pb_n_msgs)
                fail_msg("%s.%s: message %u out of range", msg->name, f->json, f->msg);
            if ((f->flags & KL_PBF_INLINE) && f->kind != KL_PB_MSG)
                fail_msg("%s.%s: inline but no message", msg->name, f->json);
            uint8_t at = kl_pb_order[msg->order + i];
            if (at >= msg->n || seen[at])
                fail_msg("%s: declaration order is no permutation", msg->name);
            seen[at] = true;
        }
    }
    for (size_t i = 0; i < kl_pb_n_roots; i++)
        assert_true(kl_pb_roots[i].msg < kl_pb_n_msgs);
    assert_true(kl_proto_known("v1", "Status"));
    assert_true(kl_proto_known("storage.k8s.io/v1", "DeleteOptions"));
    assert_false(kl_proto_known("v2", "Pod"));
}

/* The JSON shape of a decoded object: Go's struct as encoding/json writes it. */
static void test_decoding_writes_go_defaults_in_declaration_order(void **state)
{
    (void)state;
    json_object *o = parse("cm", "{'kind':'ConfigMap','apiVersion':'v1','metadata':{'name':'c',"
                                 "'namespace':'n'},'data':{'b':'2','a':'1'}}");
    char *pb = NULL;
    size_t n = 0;
    assert_int_equal(kl_proto_encode(o, &pb, &n), 0);
    json_object *back = NULL;
    assert_int_equal(kl_proto_decode(pb, n, NULL, NULL, &back), 0);
    char *text = text_of(back);
    /* TypeMeta first; empty omitempty strings and the zero creationTimestamp
     * (omitempty,omitzero) left out; map keys sorted. */
    assert_string_equal(text,
                        "{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":"
                        "\"c\",\"namespace\":\"n\"},\"data\":{\"a\":\"1\",\"b\":\"2\"}}");
    free(text);
    free(pb);
    json_object_put(back);
    json_object_put(o);

    /* A PV with nothing set: its non-pointer structs ({} or their zeros),
     * nulls for the plain lists, nothing for the omitempty ones. */
    o = parse("pv", "{'kind':'PersistentVolume','apiVersion':'v1','metadata':{'name':'x'}}");
    assert_int_equal(kl_proto_encode(o, &pb, &n), 0);
    assert_int_equal(kl_proto_decode(pb, n, NULL, NULL, &back), 0);
    text = text_of(back);
    assert_string_equal(text, "{\"kind\":\"PersistentVolume\",\"apiVersion\":\"v1\",\"metadata\":"
                              "{\"name\":\"x\"},\"spec\":{},\"status\":{}}");
    free(text);
    free(pb);
    json_object_put(back);
    json_object_put(o);

    o = parse("va", "{'kind':'VolumeAttachment','apiVersion':'storage.k8s.io/v1','metadata':"
                    "{'name':'v'},'spec':{'source':{}}}");
    assert_int_equal(kl_proto_encode(o, &pb, &n), 0);
    assert_int_equal(kl_proto_decode(pb, n, NULL, NULL, &back), 0);
    text = text_of(back);
    /* attacher and nodeName have no omitempty; status.attached neither. */
    assert_string_equal(text,
                        "{\"kind\":\"VolumeAttachment\",\"apiVersion\":\"storage.k8s.io/v1\","
                        "\"metadata\":{\"name\":\"v\"},\"spec\":{\"attacher\":\"\",\"source\":"
                        "{},\"nodeName\":\"\"},\"status\":{\"attached\":false}}");
    free(text);
    free(pb);
    json_object_put(back);
    json_object_put(o);
}

/* ---- exact bytes ------------------------------------------------------------------------------
 */

typedef struct bytes_row {
    const char *name;
    const char *json;
    bool envelope; /* the k8s\0 envelope; else the bare message */
    const char *hex;
} bytes_row;

/* Worked out by hand: key = number << 3 | wire type; ObjectMeta writes its
 * non-pointer strings (1-6), generation (7) and creationTimestamp (8, an
 * empty Time) even when empty; a Time is {1: seconds, 2: nanos}. */
#define HEX_META_C_N "0a120a016312001a016e22002a00320038004200"
static const bytes_row bytes_rows[] = {
    {"ConfigMap envelope: TypeMeta, raw, empty contentEncoding and contentType",
     "{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'c','namespace':'n'},"
     "'data':{'b':'2','a':'1'}}",
     true,
     "6b387300"                           /* k8s\0 */
     "0a0f0a0276311209436f6e6669674d6170" /* typeMeta {v1, ConfigMap} */
     "1224" HEX_META_C_N                  /* raw: metadata */
     "12060a0161120131"                   /* data a=1 (sorted) */
     "12060a0162120132"                   /* data b=2 */
     "1a002200"},
    {"Secret: map<string, bytes>, type always written, immutable nil",
     "{'apiVersion':'v1','kind':'Secret','metadata':{'name':'s','namespace':'n'},'data':"
     "{'k':'AAE='},'type':'Opaque'}",
     false,
     "0a120a017312001a016e22002a00320038004200"
     "12070a016b12020001"
     "1a064f7061717565"},
    {"Lease: pointer scalars, MicroTime with nanoseconds",
     "{'apiVersion':'coordination.k8s.io/v1','kind':'Lease','metadata':{'name':'l','namespace':"
     "'ns'},'spec':{'holderIdentity':'h','leaseDurationSeconds':15,'renewTime':"
     "'2024-01-01T00:00:00.500000Z'}}",
     false,
     "0a130a016c12001a026e7322002a00320038004200"
     "12130a0168100f220c088081c8ac061080cab5ee01"},
    {"Lease: a negative int32 is ten varint bytes",
     "{'apiVersion':'coordination.k8s.io/v1','kind':'Lease','metadata':{'name':'l','namespace':"
     "'ns'},'spec':{'leaseDurationSeconds':-1}}",
     false,
     "0a130a016c12001a026e7322002a00320038004200"
     "120b10ffffffffffffffffff01"},
    {"Status 404: ListMeta strings, StatusDetails non-pointer fields, code",
     "{'kind':'Status','apiVersion':'v1','metadata':{},'status':'Failure','message':"
     "'pods \\'x\\' not found','reason':'NotFound','details':{'name':'x','kind':'pods'},"
     "'code':404}",
     false,
     "0a060a0012001a00"
     "12074661696c757265"
     "1a12706f647320227822206e6f7420666f756e64"
     "22084e6f74466f756e64"
     "2a0f0a017812001a04706f647328003200"
     "309403"},
};

static void test_small_messages_encode_to_the_bytes_worked_out_by_hand(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(bytes_rows); i++) {
        const bytes_row *r = &bytes_rows[i];
        json_object *o = parse(r->name, r->json);
        char *pb = NULL;
        size_t n = 0;
        int rc = r->envelope ? kl_proto_encode(o, &pb, &n)
                             : kl_proto_msg_encode(kobj_str(o, "apiVersion"), kobj_str(o, "kind"),
                                                   o, &pb, &n);
        if (rc != 0)
            fail_msg("[%s] %s", r->name, util_err_last());
        assert_hex(r->name, pb, n, r->hex);
        free(pb);
        json_object_put(o);
    }
}

static void test_watch_frame_is_length_and_bare_watch_event_with_enveloped_object(void **state)
{
    (void)state;
    const char *lines = "{\"type\":\"ADDED\",\"object\":{\"apiVersion\":\"v1\",\"kind\":"
                        "\"ConfigMap\",\"metadata\":{\"name\":\"c\",\"namespace\":\"n\"},"
                        "\"data\":{\"b\":\"2\",\"a\":\"1\"}}}\n";
    char *out = NULL;
    size_t n = 0;
    assert_int_equal(kl_proto_watch_frames(lines, strlen(lines), &out, &n), 0);
    /* 4-byte length, WatchEvent{type = "ADDED", object = {raw = envelope}}:
     * the raw stream serializer adds no envelope around the event itself. */
    assert_hex("frame", out, n,
               "0000004a"
               "0a054144444544"
               "12410a3f"
               "6b3873000a0f0a0276311209436f6e6669674d61701224" HEX_META_C_N
               "12060a016112013112060a01621201321a002200");
    char *type = NULL;
    json_object *obj = NULL;
    assert_int_equal(kl_proto_watch_event_decode(out + 4, n - 4, &type, &obj), 0);
    assert_string_equal(type, "ADDED");
    assert_string_equal(kobj_path_str(obj, "data.b"), "2");
    free(type);
    json_object_put(obj);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_served_kind_round_trips_json_proto_json),
        cmocka_unit_test(test_every_builtin_type_and_its_list_has_tables),
        cmocka_unit_test(test_decoding_writes_go_defaults_in_declaration_order),
        cmocka_unit_test(test_small_messages_encode_to_the_bytes_worked_out_by_hand),
        cmocka_unit_test(test_watch_frame_is_length_and_bare_watch_event_with_enveloped_object),
    };
    return cmocka_run_group_tests_name("kube-lite protobuf", tests, NULL, NULL);
}
