#!/usr/bin/env bash
# lab-verify: the shared lab is the grid it claims to be.
. "$(dirname "$0")/test-lib.sh"
require_lab
"$LAB" verify
