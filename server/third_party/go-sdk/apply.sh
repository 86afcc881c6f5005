#!/usr/bin/env bash
# Lays go-sdk v1.8.0, as the Go module proxy serves it, into v1.8.0/ (git-ignored) and applies
# patches/*.patch in order; go.mod's replace points there (SWITCHBOARD.md says why each patch is
# kept). The Makefile runs this before it builds or tests; it does nothing when the copy was
# made from the same patches.
set -euo pipefail
cd "$(dirname "$0")"
version=v1.8.0
stamp=$(cat patches/*.patch | sha256sum | cut -c1-16)
if [ -f "$version/.patched" ] && [ "$(cat "$version/.patched")" = "$stamp" ]; then
	exit 0
fi
# Outside any module, so that switchboard's own replace does not apply.
dir=$(cd / && GOFLAGS= ${GO:-go} mod download -json "github.com/modelcontextprotocol/go-sdk@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "go-sdk $version: not in the module cache" >&2; exit 1; }
rm -rf "$version.tmp" && cp -R "$dir" "$version.tmp" && chmod -R u+w "$version.tmp"
for p in patches/*.patch; do
	patch --quiet --forward -p1 -d "$version.tmp" < "$p" || { echo "go-sdk: $p does not apply" >&2; exit 1; }
done
echo "$stamp" > "$version.tmp/.patched"
rm -rf "$version" && mv "$version.tmp" "$version"
