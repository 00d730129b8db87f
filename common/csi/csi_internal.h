/* Shared between the client and server halves of common/csi; not public. */
#ifndef CSISIDECAR_CSI_INTERNAL_H
#define CSISIDECAR_CSI_INTERNAL_H

#include <grpc/grpc.h>

#include "csi/csi.h"

/* grpc_init, with abseil's debug-build mutex deadlock detector off first
 * (see client.c). */
void csi_grpc_init(void);
gpr_timespec csi_deadline_after(util_duration d);
/* protobuf-c message <-> gRPC byte buffer. */
grpc_byte_buffer *csi_pack(const ProtobufCMessage *msg);
ProtobufCMessage *csi_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb);
/* Shuts down, drains and destroys a pluck queue. */
void csi_cq_destroy(grpc_completion_queue *cq);

#endif
