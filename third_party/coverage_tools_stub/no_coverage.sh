#!/bin/sh
echo "coverage is not available offline (see third_party/coverage_tools_stub)" >&2
exit 1
