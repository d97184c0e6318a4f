#!/bin/sh
# After ctest: the reason of every skipped test, which ctest's summary does
# not show ("SKIP <test>: <reason>", from the "SKIP: ..." line each test
# prints).  Usage: print-skips.sh BUILD_DIR.  Always exits 0.
log="${1:-.}/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
awk '
  /^[0-9]+\/[0-9]+ Test: / { name = $3; reason = "" }
  /^SKIP: / && name != "" && reason == "" { reason = substr($0, 7) }
  /^"[^"]*" end time:/ { if (reason != "") { printf "SKIP %s: %s\n", name, reason; n++ } name = "" }
  END { if (n) printf "%d test(s) skipped, each with its reason above\n", n }
' "$log"
exit 0
