#!/bin/bash
# reward.json: the share of the three lines present. No /work/lines.txt: no reward file at all.
# "slow" in the file makes the verifier hang past its timeout.
[ -f /work/lines.txt ] || exit 0
grep -q slow /work/lines.txt && sleep 60
n=$(wc -l < /work/lines.txt)
python3 -c "import json,sys; n=int(sys.argv[1]); print(json.dumps({'reward': 1.0 if n == 3 else n / 3 if n < 3 else 0.0, 'lines': n}))" "$n" > /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt
