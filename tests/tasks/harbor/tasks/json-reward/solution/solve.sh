#!/bin/bash
printf 'a\nb\nc\n' > /work/lines.txt
