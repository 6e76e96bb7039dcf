"""The donated ViT's saving as `run` says it against the chip's own fall
(issue 64: within 5 %), from what benchmarks/tpu/lane.sh wrote in OUTDIR:
vit-python.json and vit-donated-python.json (the chip's memory_stats()
after each program's last synced step) and vit.report.json (`report --json`
of the undonated program's run).

    python3 benchmarks/tpu/vit_check.py OUTDIR

The chip's peak is its arrays' high-water mark plus the program's
reservation's (peak_bytes_in_use + peak_bytes_reserved, docs/tpu.md);
exit 1 where the saving said is more than 5 % from the fall."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def chip_peak(path: Path) -> int:
    stats = json.loads(path.read_text())
    return int(stats["peak_bytes_in_use"]) + int(stats.get("peak_bytes_reserved") or 0)


def main() -> int:
    out = Path(sys.argv[1])
    before, after = chip_peak(out / "vit-python.json"), chip_peak(out / "vit-donated-python.json")
    doc = json.loads((out / "vit.report.json").read_text())
    donate = [f for f in doc["findings"] if f["rule"] == "donate"]
    if not donate:
        print("no donation finding in vit.report.json")
        return 1
    said, fall = int(donate[0]["saving_bytes"]), before - after
    off = (said - fall) / fall if fall else float("inf")
    print(f"chip: {before:,} -> {after:,} B, fall {fall:,} B; said {said:,} B ({donate[0].get('saves')}); "
          f"{off:+.2%}")
    return 0 if abs(off) <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
