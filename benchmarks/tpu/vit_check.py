"""The donated ViT's saving as `run` says it against the chip's own fall
(issue 64: within 5 %), from what benchmarks/tpu/lane.sh wrote in OUTDIR:
vit-settled-python*.json, vit-python*.json and vit-donated-python.json (the
chip's memory_stats() after each program's last synced step) and
vit.report.json (`report --json` of the undonated program's run).

    python3 benchmarks/tpu/vit_check.py OUTDIR

The chip's peak is its arrays' high-water mark plus the program's
reservation's (peak_bytes_in_use + peak_bytes_reserved, docs/tpu.md).

The undonated program's chip peak varies from run to run: the runtime frees
a step's inputs some time after the step ends, and where the next step's
outputs are allocated first, the high-water mark holds a part of three
states instead of two (8.86-9.67 GB in six runs on 2026-12-07). Given 0.5 s
after each synced step (vit.py --settle 0.5) the frees happen first, and the
peak is the same in every run: the program's own need. The fall is taken
from the settled runs; each plain run's peak is printed beside it. Exit 1
where the saving said is more than 5 % from that fall, or where the settled
runs disagree."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def chip_peak(path: Path) -> int:
    stats = json.loads(path.read_text())
    return int(stats["peak_bytes_in_use"]) + int(stats.get("peak_bytes_reserved") or 0)


def main() -> int:
    out = Path(sys.argv[1])
    settled = {p.name: chip_peak(p) for p in sorted(out.glob("vit-settled-python*.json"))}
    plain = {p.name: chip_peak(p) for p in sorted(out.glob("vit-python*.json"))}
    if not settled:
        print(f"{out}: no vit-settled-python*.json (the lane's vit-settled-python parts)")
        return 1
    for name, peak in {**settled, **plain}.items():
        print(f"{name}: chip peak {peak:,} B")
    if len(set(settled.values())) > 1:
        print("the settled runs disagree: the program's need is not one figure")
        return 1
    before, after = min(settled.values()), chip_peak(out / "vit-donated-python.json")
    if plain:
        print(f"the plain runs peak {min(plain.values()) - before:+,} to {max(plain.values()) - before:+,} B "
              f"from the settled (the runtime's frees behind the next step's outputs)")
    doc = json.loads((out / "vit.report.json").read_text())
    donate = [f for f in doc["findings"] if f["rule"] == "donate"]
    if not donate:
        print("no donation finding in vit.report.json")
        return 1
    said, fall = int(donate[0]["saving_bytes"]), before - after
    off = (said - fall) / fall if fall else float("inf")
    print(f"chip, settled: {before:,} -> {after:,} B, fall {fall:,} B; said {said:,} B ({donate[0].get('saves')}); "
          f"{off:+.2%}")
    return 0 if abs(off) <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
