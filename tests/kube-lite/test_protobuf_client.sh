#!/usr/bin/env bash
# client-go 1.20 speaking protobuf to kube-lite (as external-provisioner v6
# does): see protobuf-client/run.sh.
#
#   tests/kube-lite/test_protobuf_client.sh <build-dir>
exec bash "$(dirname "$0")/protobuf-client/run.sh" "$@"
