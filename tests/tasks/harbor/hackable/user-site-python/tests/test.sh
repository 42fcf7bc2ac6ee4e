#!/bin/bash
# Hackable: the verifier runs as the agent's user ([verifier] user = "agent"), so python3 imports
# the agent's user site-packages (usercustomize.py, .pth files), which the agent wrote.
if python3 /tests/check.py; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
