#!/usr/bin/env bash
# build-kubelet.sh OUTDIR
# Builds the upstream kubelet from the Go module proxy alone into
# OUTDIR/kubelet: a scratch module (kubelet-mod/) that requires
# k8s.io/kubernetes and replaces its v0.0.0 staging modules with their
# published versions. Skips the build when OUTDIR/kubelet already reports
# KUBE_VERSION. Cold: ~300 MB of modules, several minutes on 2 cores.
set -euo pipefail
out=${1:?usage: build-kubelet.sh OUTDIR}
version=${KUBE_VERSION:-v1.34.4}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ -x "$out/kubelet" ] && [ "$("$out/kubelet" --version 2>/dev/null)" = "Kubernetes $version" ]; then
	echo "kubelet $version already in $out"
	exit 0
fi

src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT

# k8s.io/kubernetes's own go.mod names the staging modules (k8s.io/api,
# k8s.io/client-go, k8s.io/kubelet, ...): each is published as v0.MINOR.PATCH.
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
staging=v0.${version#v1.}
replaces=$(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/.*#\t\1 => \1 '"$staging"'#p' "$gomod")
[ -n "$replaces" ] || { echo "no staging modules found in $gomod" >&2; exit 1; }
while IFS= read -r line; do
	case $line in
	@REPLACES@) printf '%s\n' "$replaces" ;;
	*) printf '%s\n' "${line//@KUBE_VERSION@/$version}" ;;
	esac
done <"$here/kubelet-mod/go.mod.in" >"$src/go.mod"
cp "$here/kubelet-mod/main.go.in" "$src/main.go"

cd "$src"
echo "kubelet $version: resolving modules ($(grep -c ' => ' go.mod) staging replaces)"
go mod tidy
minor=${version#v1.}
minor=${minor%%.*}
v=k8s.io/component-base/version
ldflags="-s -w -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
echo "kubelet $version: building"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/kubelet.tmp" .
mv "$out/kubelet.tmp" "$out/kubelet"
"$out/kubelet" --version
