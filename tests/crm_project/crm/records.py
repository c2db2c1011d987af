"""Where the CRM's processes say what they did, one JSON line each, with their pid."""

import json
import os
from pathlib import Path
from typing import Any


def record(name: str, **fields: Any) -> None:
    line = json.dumps({**fields, "pid": os.getpid()}) + "\n"
    path = Path(os.environ["CRM_RECORD_DIR"]) / f"{name}.jsonl"
    # One write of one line with O_APPEND: lines from several processes never mix.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
