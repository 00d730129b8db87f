/* The CreateVolume request the benchmarks send: a mount volume, single-node
 * writer, of a given size. Header only: each benchmark is one C file built
 * on its own by its script. */
#ifndef CSISIDECAR_BENCH_CSI_H
#define CSISIDECAR_BENCH_CSI_H

#include <stdint.h>

#include "csi/csi.h"

/* Every part of the request, so that it holds no pointer to a caller's local. */
struct bench_create {
    Csi__V1__VolumeCapability__MountVolume mount;
    Csi__V1__VolumeCapability__AccessMode mode;
    Csi__V1__VolumeCapability cap;
    Csi__V1__VolumeCapability *capp;
    Csi__V1__CapacityRange range;
    Csi__V1__CreateVolumeRequest req;
};

/* Fills c->req for a volume `name` (kept by reference) of `bytes`. */
static inline void bench_create_init(struct bench_create *c, char *name, int64_t bytes)
{
    *c = (struct bench_create){
        .mount = CSI__V1__VOLUME_CAPABILITY__MOUNT_VOLUME__INIT,
        .mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__INIT,
        .cap = CSI__V1__VOLUME_CAPABILITY__INIT,
        .range = CSI__V1__CAPACITY_RANGE__INIT,
        .req = CSI__V1__CREATE_VOLUME_REQUEST__INIT,
    };
    c->mode.mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER;
    c->cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
    c->cap.mount = &c->mount;
    c->cap.access_mode = &c->mode;
    c->capp = &c->cap;
    c->range.required_bytes = bytes;
    c->req.name = name;
    c->req.capacity_range = &c->range;
    c->req.n_volume_capabilities = 1;
    c->req.volume_capabilities = &c->capp;
}

#endif
