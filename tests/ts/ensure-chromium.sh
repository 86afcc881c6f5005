#!/usr/bin/env bash
# Prints the path of a headless-capable Chromium, installing Debian's package first when it is
# missing (as root; `make test` runs this on a fresh machine). The OAuth tests
# (tests/ts/oauth.test.mjs) drive it through puppeteer-core to answer the consent page.
set -euo pipefail
find_chromium() { command -v chromium || command -v chromium-browser || true; }
if [ -z "$(find_chromium)" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "ensure-chromium: chromium is missing; install it (apt-get install chromium)" >&2
		exit 1
	fi
	echo "ensure-chromium: installing chromium" >&2
	export DEBIAN_FRONTEND=noninteractive
	# Another apt run (ensure-haproxy.sh) may hold the lock for a while.
	apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
	apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
fi
find_chromium
