#!/bin/bash
# Reward 1 when /app/out.txt holds exactly "$EXPECTED", else 0. Exit status is ignored.
if [ "$(cat /app/out.txt 2>/dev/null)" = "$EXPECTED" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit 3
