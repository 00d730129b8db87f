#!/usr/bin/env bash
# Makes a throwaway CA and a server certificate for 127.0.0.1/localhost, for
# running kube-lite with --tls-cert-file in tests and the demo.
#
#   hack/kube-lite/gen-certs.sh <dir>   -> <dir>/{ca.crt,ca.key,server.crt,server.key}
set -euo pipefail
dir=${1:?usage: gen-certs.sh <dir>}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=kube-lite-ca" \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-lite" -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >ext.cnf
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
  -extfile ext.cnf -out server.crt 2>/dev/null
rm -f server.csr ext.cnf ca.srl
echo "$dir"
