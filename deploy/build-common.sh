# build-common.sh: what deploy/container/build.sh and
# deploy/package/build-deb.sh share. Sourced, not run:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/../build-common.sh"
#
# It sets `repo` (the repository's top directory) and `prog` (the calling
# script's name, for messages), and defines:
#
#   build_help            print the calling script's header comment (its -h)
#   build_no_args ARGS    refuse positional arguments (after getopts)
#   build_git_version     git describe of the repository, or dev
#   build_epoch FALLBACK  SOURCE_DATE_EPOCH, else HEAD's commit time, else FALLBACK
#   build_workdir         a temporary directory in `work`, removed on exit
#   build_go OUT VERSION GOARCH
#                         the static, trimmed bridgehead binary (GOARM=7 on arm)
#
# Both outputs are reproducible; a change here must leave their bytes as
# they are (the image digest is pinned in manifests).

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prog=$(basename "$0")

build_help() {
	sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

build_no_args() {
	if [ $# -gt 0 ]; then
		echo "$prog: unexpected arguments: $*" >&2
		exit 2
	fi
}

build_git_version() {
	git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev
}

build_epoch() {
	echo "${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo "$1")}"
}

build_workdir() {
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
}

build_go() {
	(cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=$3 GOARM=7 \
		go build -trimpath -ldflags "-s -w -X main.version=$2" -o "$1" ./cmd/bridgehead)
}
