#!/usr/bin/env bash
# Prints the hash of what the gateway image is made of, as committed at
# HEAD: the git tree of deploy/image, deploy/package, deploy/systemd,
# deploy/build-common.sh, go.mod and go.sum. make image records it in
# .ci/image-built after a successful build, and .ci/run builds the image
# only when the hash differs from that record (and from the last image this
# machine built). The bridgehead binary inside is the one every other test
# runs; the image build checks the image's own machinery.
set -euo pipefail
cd "$(dirname "$0")/../.."
git ls-tree -r HEAD -- deploy/image deploy/package deploy/systemd deploy/build-common.sh go.mod go.sum | sha256sum | cut -c1-16
