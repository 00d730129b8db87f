// kl-protobuf-client: client-go (Kubernetes 1.20's, vendored in its source
// tree) configured as external-provisioner v6 configures it, with
// ContentType application/vnd.kubernetes.protobuf, against kube-lite. Every
// request body it sends (create, update, status update, DeleteOptions) and
// every answer it reads (objects, lists, Status errors, watch frames) is
// protobuf, decoded by client-go's own generated code: whatever kube-lite
// gets wrong on the wire fails here as it would fail the sidecars.
//
//	kl-protobuf-client --kubeconfig FILE
//
// Prints "ok <step>" or "FAIL <step>: <why>" per step and ends with
// "N passed, N failed"; exits 1 on a failure.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"reflect"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var passed, failed int

func check(step string, err error) bool {
	if err != nil {
		failed++
		fmt.Printf("FAIL %s: %v\n", step, err)
		return false
	}
	passed++
	fmt.Printf("ok   %s\n", step)
	return true
}

func want(step string, cond bool, format string, args ...interface{}) bool {
	if cond {
		return check(step, nil)
	}
	return check(step, fmt.Errorf(format, args...))
}

// notFound: the error of a read after delete must be the protobuf Status
// decoded into a NotFound.
func notFound(step string, err error) {
	want(step, apierrors.IsNotFound(err), "want NotFound, got %v", err)
}

// events waits for the watch to deliver `types` in order.
func events(step string, w watch.Interface, types ...watch.EventType) []watch.Event {
	var got []watch.Event
	timeout := time.After(10 * time.Second)
	for len(got) < len(types) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				check(step, fmt.Errorf("watch ended after %d events", len(got)))
				return got
			}
			got = append(got, ev)
		case <-timeout:
			check(step, fmt.Errorf("%d of %d events before the timeout", len(got), len(types)))
			return got
		}
	}
	for i, ev := range got {
		if ev.Type != types[i] {
			check(step, fmt.Errorf("event %d is %s, want %s", i, ev.Type, types[i]))
			return got
		}
	}
	check(step, nil)
	return got
}

func persistentVolumes(ctx context.Context, cs kubernetes.Interface) {
	pvs := cs.CoreV1().PersistentVolumes()
	list, err := pvs.List(ctx, metav1.ListOptions{})
	if !check("pv: list before", err) {
		return
	}
	w, err := pvs.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if !check("pv: watch", err) {
		return
	}
	defer w.Stop()
	mode := corev1.PersistentVolumeFilesystem
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pbc-pv", Labels: map[string]string{"a": "b"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "d.example.com", VolumeHandle: "h-1", FSType: "ext4",
				VolumeAttributes:     map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "1-2"},
				NodePublishSecretRef: &corev1.SecretReference{Name: "s", Namespace: "default"},
			}},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              "sc",
			VolumeMode:                    &mode,
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-1"}},
				}}},
			}},
		},
	}
	created, err := pvs.Create(ctx, pv, metav1.CreateOptions{})
	if !check("pv: create", err) {
		return
	}
	want("pv: create answer", created.UID != "" && reflect.DeepEqual(created.Spec.CSI, pv.Spec.CSI) &&
		reflect.DeepEqual(created.Spec.NodeAffinity, pv.Spec.NodeAffinity),
		"answer %+v", created.Spec)
	got, err := pvs.Get(ctx, "pbc-pv", metav1.GetOptions{})
	if check("pv: get", err) {
		q := got.Spec.Capacity[corev1.ResourceStorage]
		want("pv: get answer", q.Cmp(resource.MustParse("5Gi")) == 0 && got.Labels["a"] == "b" &&
			!got.CreationTimestamp.IsZero(), "got %+v", got)
	}
	list, err = pvs.List(ctx, metav1.ListOptions{})
	if check("pv: list", err) {
		want("pv: list answer", len(list.Items) == 1 && list.Items[0].Name == "pbc-pv" && list.ResourceVersion != "",
			"got %d items", len(list.Items))
	}
	got.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	got, err = pvs.Update(ctx, got, metav1.UpdateOptions{})
	if check("pv: update", err) {
		want("pv: update answer", got.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRetain,
			"policy %s", got.Spec.PersistentVolumeReclaimPolicy)
	}
	got.Status.Phase = corev1.VolumeAvailable
	got, err = pvs.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if check("pv: update status", err) {
		want("pv: status answer", got.Status.Phase == corev1.VolumeAvailable, "phase %s", got.Status.Phase)
	}
	_, err = pvs.Update(ctx, created, metav1.UpdateOptions{})
	want("pv: stale update is a Conflict", apierrors.IsConflict(err), "got %v", err)
	got, err = pvs.Patch(ctx, "pbc-pv", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"pv.kubernetes.io/provisioned-by":"d.example.com"}}}`), metav1.PatchOptions{})
	if check("pv: patch", err) {
		want("pv: patch answer", got.Annotations["pv.kubernetes.io/provisioned-by"] == "d.example.com", "got %v", got.Annotations)
	}
	wrong := types.UID("not-it")
	err = pvs.Delete(ctx, "pbc-pv", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrong}})
	want("pv: delete with a wrong uid precondition is a Conflict", apierrors.IsConflict(err), "got %v", err)
	uid := got.UID
	check("pv: delete", pvs.Delete(ctx, "pbc-pv", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}))
	_, err = pvs.Get(ctx, "pbc-pv", metav1.GetOptions{})
	notFound("pv: get after delete", err)
	evs := events("pv: watch events", w, watch.Added, watch.Modified, watch.Modified, watch.Modified, watch.Deleted)
	if len(evs) == 5 {
		last, ok := evs[4].Object.(*corev1.PersistentVolume)
		want("pv: watch objects are typed", ok && last.Name == "pbc-pv" && last.Spec.CSI != nil &&
			last.Spec.CSI.VolumeHandle == "h-1", "got %T", evs[4].Object)
	}
}

func claims(ctx context.Context, cs kubernetes.Interface) {
	pvcs := cs.CoreV1().PersistentVolumeClaims("default")
	sc := "sc"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "pbc-c", Finalizers: []string{"kubernetes.io/pvc-protection"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: &sc,
		},
	}
	created, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{})
	if !check("pvc: create", err) {
		return
	}
	want("pvc: create answer", *created.Spec.StorageClassName == "sc" && created.Status.Phase == corev1.ClaimPending,
		"got %+v", created)
	got, err := pvcs.Patch(ctx, "pbc-c", types.StrategicMergePatchType,
		[]byte(`{"metadata":{"annotations":{"volume.kubernetes.io/selected-node":"node-1"}}}`), metav1.PatchOptions{})
	if check("pvc: strategic merge patch", err) {
		want("pvc: patch answer", got.Annotations["volume.kubernetes.io/selected-node"] == "node-1", "got %v", got.Annotations)
	}
	got.Spec.VolumeName = "pbc-pv"
	got, err = pvcs.Update(ctx, got, metav1.UpdateOptions{})
	if check("pvc: update", err) {
		want("pvc: update answer", got.Spec.VolumeName == "pbc-pv", "volumeName %q", got.Spec.VolumeName)
	}
	got.Status.Phase = corev1.ClaimBound
	got.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	got, err = pvcs.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if check("pvc: update status", err) {
		want("pvc: status answer", got.Status.Phase == corev1.ClaimBound, "phase %s", got.Status.Phase)
	}
	list, err := pvcs.List(ctx, metav1.ListOptions{LabelSelector: ""})
	if check("pvc: list", err) {
		want("pvc: list answer", len(list.Items) == 1, "%d items", len(list.Items))
	}
	check("pvc: delete", pvcs.Delete(ctx, "pbc-c", metav1.DeleteOptions{}))
	got, err = pvcs.Get(ctx, "pbc-c", metav1.GetOptions{})
	if check("pvc: get while its finalizer holds it", err) {
		want("pvc: deletionTimestamp set", got.DeletionTimestamp != nil, "no deletionTimestamp")
	}
	_, err = pvcs.Patch(ctx, "pbc-c", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`),
		metav1.PatchOptions{})
	check("pvc: finalizer removed", err)
	_, err = pvcs.Get(ctx, "pbc-c", metav1.GetOptions{})
	notFound("pvc: gone", err)
}

func attachments(ctx context.Context, cs kubernetes.Interface) {
	vas := cs.StorageV1().VolumeAttachments()
	pv := "pbc-pv"
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-pbc"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "d.example.com", NodeName: "node-1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
	}
	got, err := vas.Create(ctx, va, metav1.CreateOptions{})
	if !check("va: create", err) {
		return
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	got.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"devicePath": "/dev/xvdb"},
		DetachError: &storagev1.VolumeError{Time: now, Message: "busy"}}
	got, err = vas.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if check("va: update status", err) {
		want("va: status answer", got.Status.Attached && got.Status.AttachmentMetadata["devicePath"] == "/dev/xvdb" &&
			got.Status.DetachError != nil && got.Status.DetachError.Time.Equal(&now), "got %+v", got.Status)
	}
	got, err = vas.Get(ctx, "csi-pbc", metav1.GetOptions{})
	if check("va: get", err) {
		want("va: get answer", *got.Spec.Source.PersistentVolumeName == "pbc-pv" && got.Status.Attached, "got %+v", got)
	}
	check("va: delete", vas.Delete(ctx, "csi-pbc", metav1.DeleteOptions{}))
	_, err = vas.Get(ctx, "csi-pbc", metav1.GetOptions{})
	notFound("va: gone", err)
}

func leases(ctx context.Context, cs kubernetes.Interface) {
	ls := cs.CoordinationV1().Leases("default")
	holder := "me"
	secs := int32(15)
	acquired := metav1.NewMicroTime(time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "pbc-lock"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs,
			AcquireTime: &acquired, RenewTime: &acquired},
	}
	got, err := ls.Create(ctx, lease, metav1.CreateOptions{})
	if !check("lease: create", err) {
		return
	}
	want("lease: MicroTime keeps microseconds", got.Spec.AcquireTime.Time.Equal(acquired.Time), "got %v", got.Spec.AcquireTime)
	// Renewal as leader election does it: a PUT carrying the resourceVersion.
	renewed := metav1.NewMicroTime(acquired.Add(2 * time.Second))
	got.Spec.RenewTime = &renewed
	transitions := int32(1)
	got.Spec.LeaseTransitions = &transitions
	got, err = ls.Update(ctx, got, metav1.UpdateOptions{})
	if check("lease: renew", err) {
		want("lease: renew answer", got.Spec.RenewTime.Time.Equal(renewed.Time) && *got.Spec.LeaseTransitions == 1,
			"got %+v", got.Spec)
	}
	check("lease: delete", ls.Delete(ctx, "pbc-lock", metav1.DeleteOptions{}))
}

func recorderEvents(ctx context.Context, cs kubernetes.Interface) {
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "pbc-pvc.1", Namespace: "default"},
		EventTime:           metav1.NewMicroTime(time.Date(2024, 1, 1, 0, 0, 0, 1000, time.UTC)),
		ReportingController: "external-provisioner", ReportingInstance: "p-1",
		Action: "Provisioning", Reason: "Provisioning", Type: corev1.EventTypeNormal, Note: "External provisioner is provisioning",
		Regarding: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: "pbc-c"},
	}
	got, err := cs.EventsV1().Events("default").Create(ctx, ev, metav1.CreateOptions{})
	if check("events.k8s.io: create", err) {
		want("events.k8s.io: create answer", got.EventTime.Time.Equal(ev.EventTime.Time) && got.Regarding.Name == "pbc-c",
			"got %+v", got)
	}
	_, err = cs.EventsV1().Events("default").Patch(ctx, "pbc-pvc.1", types.StrategicMergePatchType,
		[]byte(`{"series":{"count":2,"lastObservedTime":"2024-01-01T00:00:05.000000Z"}}`), metav1.PatchOptions{})
	check("events.k8s.io: series patch", err)
	got, err = cs.EventsV1().Events("default").Get(ctx, "pbc-pvc.1", metav1.GetOptions{})
	if check("events.k8s.io: get", err) {
		want("events.k8s.io: series", got.Series != nil && got.Series.Count == 2 &&
			got.Series.LastObservedTime.Time.Equal(time.Date(2024, 1, 1, 0, 0, 5, 0, time.UTC)), "got %+v", got.Series)
	}
	check("events.k8s.io: delete", cs.EventsV1().Events("default").Delete(ctx, "pbc-pvc.1", metav1.DeleteOptions{}))

	// core/v1 as tools/record writes it: a POST, then a patch of the count.
	first := metav1.NewTime(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	cev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "pbc-pvc.2", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: "pbc-c"},
		Reason:         "ProvisioningSucceeded", Message: "done", Type: corev1.EventTypeNormal, Count: 1,
		Source: corev1.EventSource{Component: "external-provisioner"}, FirstTimestamp: first, LastTimestamp: first,
	}
	_, err = cs.CoreV1().Events("default").Create(ctx, cev, metav1.CreateOptions{})
	check("core event: create", err)
	core, err := cs.CoreV1().Events("default").Patch(ctx, "pbc-pvc.2", types.StrategicMergePatchType,
		[]byte(`{"count":2,"lastTimestamp":"2024-01-01T00:01:00Z"}`), metav1.PatchOptions{})
	if check("core event: count patch", err) {
		want("core event: patch answer", core.Count == 2 && core.FirstTimestamp.Equal(&first) &&
			core.LastTimestamp.Time.Equal(first.Add(time.Minute)), "got %+v", core)
	}
	check("core event: delete", cs.CoreV1().Events("default").Delete(ctx, "pbc-pvc.2", metav1.DeleteOptions{}))
}

func secrets(ctx context.Context, cs kubernetes.Interface) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pbc-s"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"bin": {0, 1, 0xff}, "empty": {}}}
	got, err := cs.CoreV1().Secrets("default").Create(ctx, s, metav1.CreateOptions{})
	if check("secret: create", err) {
		want("secret: bytes", reflect.DeepEqual(got.Data["bin"], []byte{0, 1, 0xff}) && len(got.Data["empty"]) == 0,
			"got %v", got.Data)
	}
	check("secret: delete", cs.CoreV1().Secrets("default").Delete(ctx, "pbc-s", metav1.DeleteOptions{}))
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the server")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// As external-provisioner v6 and the other sidecars set it.
	config.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	persistentVolumes(ctx, cs)
	claims(ctx, cs)
	attachments(ctx, cs)
	leases(ctx, cs)
	recorderEvents(ctx, cs)
	secrets(ctx, cs)
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
