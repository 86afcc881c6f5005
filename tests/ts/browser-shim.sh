#!/bin/sh
# The "browser" mcp-remote opens (through BROWSER): hands the URL to tests/ts/oauth.test.mjs,
# which drives headless Chromium to it.
printf '%s\n' "$1" >> "$SB_BROWSER_URLS"
