import sys
from pathlib import Path

out = Path("/app/out.txt")
sys.exit(0 if out.is_file() and out.read_text() == "hello\n" else 1)
