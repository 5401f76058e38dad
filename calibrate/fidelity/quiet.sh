#!/usr/bin/env bash
# Run a timing-sensitive command under the CPU quiet protocol: create /tmp/servesim-QUIET (colleagues
# hold off heavy work while it exists), give running jobs a minute to finish, run the command, and
# always remove the flag. Usage: calibrate/fidelity/quiet.sh COMMAND [ARGS...]
set -euo pipefail
FLAG=/tmp/servesim-QUIET
SETTLE_S=${QUIET_SETTLE_S:-60}
touch "$FLAG"
trap 'rm -f "$FLAG"' EXIT
echo "quiet: $FLAG created; settling up to ${SETTLE_S}s (load: $(cut -d' ' -f1 /proc/loadavg))" >&2
for _ in $(seq 1 $((SETTLE_S / 5))); do
    # 1-minute load average lags; stop waiting early once the last 5 s were nearly idle.
    busy=$(top -bn2 -d5 | awk '/^%Cpu/ {idle=$8} END {print 100 - idle}')
    if awk -v b="$busy" 'BEGIN {exit !(b < 15)}'; then break; fi
done
echo "quiet: starting (cpu busy ${busy:-?}%)" >&2
"$@"
