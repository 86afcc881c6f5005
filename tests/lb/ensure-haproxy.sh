#!/usr/bin/env bash
# Prints the path of haproxy, installing Debian's package first when it is missing (as root;
# `make test` runs this on a fresh machine). The load-balancer test runs two replicas behind it.
set -euo pipefail
if ! command -v haproxy >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		echo "ensure-haproxy: haproxy is missing; install it (apt-get install haproxy)" >&2
		exit 1
	fi
	echo "ensure-haproxy: installing haproxy" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq haproxy >&2
fi
command -v haproxy
