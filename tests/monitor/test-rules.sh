#!/bin/bash
# monitor-rules: promtool check rules etc/qcg-alerts.yml, then promtool test
# rules tests/monitor/alerts-test.yml (each alert fires on its series, and
# only there).
set -u
top=$1
command -v promtool >/dev/null ||
  { echo "FAIL: promtool not found (Debian package prometheus: scripts/install-deps)"; exit 1; }
fails=0
promtool check rules "$top/etc/qcg-alerts.yml" || fails=$((fails + 1))
(cd "$top/tests/monitor" && promtool test rules alerts-test.yml) || fails=$((fails + 1))
[ "$fails" -eq 0 ] && echo "monitor-rules: all passed" || echo "monitor-rules: $fails failed"
[ "$fails" -eq 0 ]
